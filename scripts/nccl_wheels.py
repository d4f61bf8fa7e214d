#!/usr/bin/env python3
"""The real NCCL for the test suite: a few nvidia-nccl wheels from PyPI, pinned, cached, unpacked.

    /usr/bin/python3 scripts/nccl_wheels.py fetch      # download (pip) what the cache lacks, check, unpack
    /usr/bin/python3 scripts/nccl_wheels.py list       # JSON lines: each cached release, for the tests
    /usr/bin/python3 scripts/nccl_wheels.py formats    # write tests/fixtures/nccl-formats/<release>.txt
    /usr/bin/python3 scripts/nccl_wheels.py formats --print RELEASE   # one release's fixture to stdout

A test tool, not a dependency of the exporter. The cache is $NCCL_WHEELS_CACHE, else
~/.cache/memlock-exporter/nccl-wheels: <cache>/dl/<wheel> as pip downloaded it, and
<cache>/<release>/ unpacked, a site-packages layout (nvidia/nccl/lib/libnccl.so.2 beside
nvidia_nccl_cuXX-X.dist-info/), which is how PyTorch's dependency installs NCCL. A wheel whose
sha256 is not the pinned one is refused and removed. `fetch` exits 3 when PyPI cannot be reached,
so that CI can tell a missing network from a broken wheel.

The fixtures are the log format strings a reader of NCCL_DEBUG=INFO output needs, taken from the
library itself: the NUL-terminated strings of its .rodata section (located through the ELF section
headers) that hold a printf conversion and match one of FORMAT_PATTERNS, in file order, each
once. Each fixture's header names the wheel, its sha256, ncclGetVersion's answer and the library's
version string. Standard library only.
"""

import argparse
import hashlib
import json
import os
import re
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

# (release, PyPI project, version, wheel file, sha256). The newest cu12, one 2.2x cu12, and the
# newest cu11. A release is `cuXX-X.Y.Z`: one name for the cache, the fixtures and the tests.
WHEELS = [
    (
        "cu12-2.32.3",
        "nvidia-nccl-cu12",
        "2.32.3",
        "nvidia_nccl_cu12-2.32.3-py3-none-manylinux_2_27_x86_64.whl",
        "bb94b2348e4861d5e8aa00b36c3d12d9bdf9c6369b82cbb723de0b582280a21c",
    ),
    (
        "cu12-2.23.4",
        "nvidia-nccl-cu12",
        "2.23.4",
        "nvidia_nccl_cu12-2.23.4-py3-none-manylinux2014_x86_64.whl",
        "b097258d9aab2fa9f686e33c6fe40ae57b27df60cedbd15d139701bb5509e0c1",
    ),
    (
        "cu11-2.21.5",
        "nvidia-nccl-cu11",
        "2.21.5",
        "nvidia_nccl_cu11-2.21.5-py3-none-manylinux2014_x86_64.whl",
        "49d8350629c7888701d1fd200934942671cb5c728f49acc5a0b3a768820bed29",
    ),
]

# What a log reader needs: the version line, the connection lines (every transport's, CollNet's
# and NVLS's set-up included), registration and verbs failures, the network in use, communicator
# init, the variables NCCL says it read, CUDA failures and the WARN/INFO headers.
FORMAT_PATTERNS = [
    r"^NCCL version %",
    r"^Channel %",
    r"^CollNet %.* via COLLNET/",
    r"^NVLS comm %p headRank",
    r" set by environment to %",
    r"^([\w/]+: )?NCCL_\w+ set to %s$",
    r"Call to ibv_",
    r"^NET/IB ?: ?Using",
    r"^Using network %",
    r"NET/IB.*\b(reg|Reg|MR|mr)\b",
    r"\bRegistered MR\b",
    r"\bregister (comm|userbuff|buffer)\b",
    r"cudaHostRegister",
    r" - Init (START|COMPLETE)",
    r"^comm %p rank %d nRanks %d nNodes %d",
    r"Cuda failure",
    r"NCCL (WARN|INFO)",
]

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "nccl-formats"


def cache_dir():
    env = os.environ.get("NCCL_WHEELS_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "memlock-exporter" / "nccl-wheels"


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def library_of(release):
    return cache_dir() / release / "nvidia" / "nccl" / "lib" / "libnccl.so.2"


def fetch():
    cache = cache_dir()
    dl = cache / "dl"
    dl.mkdir(parents=True, exist_ok=True)
    for release, project, version, wheel, pinned in WHEELS:
        if library_of(release).is_file() and (cache / release / ".sha256").is_file():
            continue
        path = dl / wheel
        if not path.is_file():
            # The platform tag of the pinned file: pip picks exactly that wheel on any host.
            platform = wheel.rsplit("-", 1)[1].removesuffix(".whl")
            command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                       "--platform", platform, "--python-version", "3", "--implementation", "py",
                       "-d", str(dl), f"{project}=={version}"]
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode != 0 or not path.is_file():
                print(f"nccl_wheels: cannot download {project}=={version} from PyPI:\n{result.stderr.strip()}",
                      file=sys.stderr)
                return 3
        actual = sha256(path)
        if actual != pinned:
            path.unlink()
            print(f"nccl_wheels: {wheel}: sha256 {actual}, pinned {pinned}: removed", file=sys.stderr)
            return 1
        target = cache / release
        with zipfile.ZipFile(path) as z:
            z.extractall(target)
        (target / ".sha256").write_text(pinned + "\n")
        print(f"nccl_wheels: {release}: {library_of(release)}")
    return 0


def cached():
    """The releases whose wheel is unpacked and was checked against its pin."""
    for release, project, version, wheel, pinned in WHEELS:
        stamp = cache_dir() / release / ".sha256"
        if library_of(release).is_file() and stamp.is_file() and stamp.read_text().strip() == pinned:
            yield release, project, version, wheel, pinned


NCCL_GET_VERSION = (
    "import ctypes, sys\n"
    "lib = ctypes.CDLL(sys.argv[1])\n"
    "v = ctypes.c_int()\n"
    "rc = lib.ncclGetVersion(ctypes.byref(v))\n"
    "print(v.value if rc == 0 else -rc)\n"
)


def nccl_get_version(library):
    # In a child: loading one library per process keeps the releases from sharing symbols.
    out = subprocess.run([sys.executable, "-I", "-c", NCCL_GET_VERSION, str(library)],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def rodata(library):
    """The .rodata section's bytes, found through the ELF64 section headers."""
    with open(library, "rb") as f:
        header = f.read(64)
        if header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
            raise ValueError(f"{library}: not a 64-bit little-endian ELF file")
        (shoff,) = struct.unpack_from("<Q", header, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", header, 0x3A)
        f.seek(shoff)
        table = f.read(shentsize * shnum)
        sections = [struct.unpack_from("<IIQQQQ", table, i * shentsize) for i in range(shnum)]
        names_section = sections[shstrndx]
        f.seek(names_section[4])
        names = f.read(names_section[5])
        for name, _type, _flags, _addr, offset, size in sections:
            if names[name:names.index(b"\0", name)] == b".rodata":
                f.seek(offset)
                return f.read(size)
    raise ValueError(f"{library}: no .rodata section")


def escape(text):
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")


def formats_of(library):
    patterns = [re.compile(p) for p in FORMAT_PATTERNS]
    data = rodata(library)
    version_string = None
    seen = set()
    out = []
    for raw in data.split(b"\0"):
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError:
            continue
        if version_string is None and re.match(r"NCCL version \d", text):
            version_string = text
        # The version line is printed through "%s" (init.cc showVersion): the string is its format.
        printed_whole = text == version_string
        if ("%" not in text and not printed_whole) or text in seen:
            continue
        if printed_whole or any(p.search(text) for p in patterns):
            seen.add(text)
            out.append(escape(text))
    return version_string, out


def fixture(release, wheel, pinned):
    library = library_of(release)
    version_string, formats = formats_of(library)
    lines = [
        f"# NCCL log format strings of {release}, from the library itself",
        f"# wheel: {wheel}",
        f"# sha256: {pinned}",
        f"# ncclGetVersion: {nccl_get_version(library)}",
        f"# library: {version_string}",
        "# by scripts/nccl_wheels.py formats: the version line and the .rodata strings with a printf conversion",
        "# that match its FORMAT_PATTERNS, one per line in file order, each once; \\n, \\t and \\\\ are escaped",
    ]
    return "\n".join(lines + formats) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch")
    sub.add_parser("list")
    formats = sub.add_parser("formats")
    formats.add_argument("--print", metavar="RELEASE")
    args = parser.parse_args()
    if args.command == "fetch":
        return fetch()
    if args.command == "list":
        for release, project, version, wheel, pinned in cached():
            site = cache_dir() / release
            print(json.dumps({"release": release, "project": project, "version": version, "wheel": wheel,
                              "sha256": pinned, "site": str(site), "library": str(library_of(release))}))
        return 0
    releases = list(cached())
    if args.print:
        for release, _project, _version, wheel, pinned in releases:
            if release == args.print:
                sys.stdout.write(fixture(release, wheel, pinned))
                return 0
        print(f"nccl_wheels: {args.print} is not cached (run fetch)", file=sys.stderr)
        return 1
    if not releases:
        print("nccl_wheels: no release cached (run fetch)", file=sys.stderr)
        return 1
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for release, _project, _version, wheel, pinned in releases:
        (FIXTURES / f"{release}.txt").write_text(fixture(release, wheel, pinned))
        print(f"nccl_wheels: {FIXTURES / (release + '.txt')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
