"""The CUDA interposer libegpu-vcuda.so, preloaded over the mock driver
(tests/mock: libcuda.so.1 and libnvidia-ml.so.1 sharing one simulated
machine through EGPU_MOCK_CUDA_STATE), driven through the driver-API program
tests/vcuda/vcuda_probe.c, which answers one line per command.

* Interposition: the exported symbols are exactly hook_table.h plus dlsym;
  the library needs only libc; every hooked name looked up with dlsym
  (through RTLD_DEFAULT, the libcuda handle and the interposer's own) is the
  wrapper, every other name the driver's; cuGetProcAddress_v2 gives the
  wrapper for every hooked entry at the versions and per-thread flags the
  driver resolves them to, over the plain mock and over a mock whose own
  references bind locally (-Bsymbolic, as a real driver's), and passes the
  rest through; dlsym(RTLD_NEXT) keeps its caller; a process that never
  touches CUDA is left alone.
* Memory limit, for every allocation path and through each lookup path
  (direct calls, dlsym, cuGetProcAddress_v2): allocations up to the limit
  succeed, the next one that would pass it fails with
  CUDA_ERROR_OUT_OF_MEMORY (after the 2 MiB rounding), the driver (mock)
  took nothing for it, frees give it back; exactly the remainder fits;
  contexts count EGPU_VCUDA_CONTEXT_MIB and destroying one gives back what
  was allocated in it; cuMemGetInfo, cuDeviceTotalMem and NVML report the
  limit, never underflowing; only the configured cards are limited.
* Processes: four share one limit; a SIGKILLed process's memory returns
  within one second; a forked child is counted and its parent keeps its
  usage.
* Bad input: no configuration (the allocation directory hidden), a broken
  vcuda.conf or a broken variable gives one log line naming it (and the
  key) and refuses every CUDA call without a crash: cuInit gets
  CUDA_ERROR_NOT_PERMITTED, every other hooked call
  CUDA_ERROR_NOT_INITIALIZED, and the driver is never initialised; a
  process that never touches CUDA stays silent;
  a corrupted, truncated or foreign-version shared region gives one log line
  and is re-initialised, keeping who holds memory: nothing is reserved until
  each live process has registered its usage again.
* Compute limit: CUDA graph launches (cuGraphLaunch, cuGraphLaunch_ptsz) are
  held to the share like kernels; kernels launched into a stream capture are
  neither timed nor charged, and the controller's event queries never
  invalidate a capture in global mode; the compute and memory regions
  truncated over and over under running processes kill none of them (no
  SIGBUS), and the processes stay held to their share and their memory
  counted.
* egpu-vcuda-inspect: the text and JSON reports of a container's regions
  match what its processes hold (MiB per process and card, core and limit),
  a SIGKILLed process's slot shows as dead, a truncated or garbage region
  and a link planted at a region's name exit 1 naming the file, and the
  tool never changes either file (bytes and mtime).
"""
import os
import pathlib
import queue
import re
import signal
import subprocess
import threading
import time

import pytest

from conftest import ROOT

MIB = 1 << 20
GRAN = 2 * MIB
CTX_MIB = 300
CARD_BYTES = 80 * 1024 * MIB  # the mock's default A100 80GB
LINE_TIMEOUT = 30  # seconds for one answer, generous for a loaded CI machine
OOM = 2
NOT_INITIALIZED = 3
INVALID_CONTEXT = 201
NOT_PERMITTED = 800
NVML_LIBRARY_NOT_FOUND = 12
# A configuration that limits nothing (100% of every card, no memory limit),
# for the tests of the lookup paths: without one the interposer refuses CUDA.
UNLIMITED = {"EGPU_VCUDA_CORE": "100"}
UUID0 = "GPU-6d0c1c3e-0000-4000-8000-000000000000"
UUID1 = "GPU-6d0c1c3e-0000-4000-8000-000000000001"


def round_up(n, g=GRAN):
    return (n + g - 1) // g * g


def hooked_names():
    text = (ROOT / "src" / "vcuda" / "hook_table.h").read_text()
    return re.findall(r"X\((CUDA|NVML), (\w+)\)", text)


@pytest.fixture(scope="module")
def paths(build_dir):
    p = {
        "lib": build_dir / "src" / "vcuda" / "libegpu-vcuda.so",
        "probe": build_dir / "tests" / "vcuda" / "vcuda_probe",
        "direct": build_dir / "tests" / "vcuda" / "vcuda_probe_direct",
        "mock": build_dir / "tests" / "mock" / "cuda",
        "symbolic": build_dir / "tests" / "vcuda" / "cuda-symbolic",
        "mockctl": build_dir / "tests" / "mock" / "mockctl",
        "inspect": build_dir / "src" / "vcuda" / "egpu-vcuda-inspect",
    }
    for k, v in p.items():
        if not v.exists():
            pytest.fail(f"{v} not built: run `make build` first")
    return p


@pytest.fixture
def world(tmp_path, paths):
    """A simulated machine (state file) and an allocation directory."""
    alloc = tmp_path / "alloc"
    alloc.mkdir()
    return {"state": tmp_path / "mock.state", "dir": alloc, "paths": paths}


def make_env(world, conf=None, preload=True, symbolic=False):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("EGPU_VCUDA_", "EGPU_MOCK_", "LD_"))}
    p = world["paths"]
    libs = [str(p["mock"])]
    if symbolic:
        libs.insert(0, str(p["symbolic"]))
    env.update({
        "LD_LIBRARY_PATH": ":".join(libs),
        "EGPU_MOCK_CUDA_STATE": str(world["state"]),
        "EGPU_VCUDA_DIR": str(world["dir"]),
        "EGPU_PROBE_INTERPOSER": str(p["lib"]),
    })
    if preload:
        env["LD_PRELOAD"] = str(p["lib"])
    env.update(conf or {})
    return env


class Probe:
    """vcuda_probe as a child process: one command in, one line out."""

    def __init__(self, world, lookup="direct", conf=None, symbolic=False, version=None):
        p = world["paths"]
        exe = p["direct"] if lookup == "direct" else p["probe"]
        args = [str(exe), "--lookup", lookup]
        if version:
            args += ["--cuda-version", str(version)]
        self.err_path = world["dir"].parent / f"probe-{id(self)}.err"
        self.err = open(self.err_path, "w+")
        self.p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.err, text=True, bufsize=1,
                                  env=make_env(world, conf, symbolic=symbolic))
        self.lines = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.p.stdout:
            self.lines.put(line.split())
        self.lines.put(None)

    def send(self, cmd):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()

    def read(self):
        try:
            line = self.lines.get(timeout=LINE_TIMEOUT)
        except queue.Empty:
            raise AssertionError(f"no answer in {LINE_TIMEOUT} s; stderr: {self.stderr()}")
        if line is None:
            raise AssertionError(f"probe exited {self.p.wait()}; stderr: {self.stderr()}")
        return line

    def __call__(self, cmd):
        self.send(cmd)
        return self.read()

    def rc(self, cmd):
        """The CUresult of a command answered "<cmd> <rc> ..."."""
        return int(self(cmd)[1])

    def stderr(self):
        if not self.err.closed:
            self.err.flush()
        return pathlib.Path(self.err_path).read_text()

    def close(self):
        if self.p.poll() is None:
            try:
                self.send("quit")
            except BrokenPipeError:
                pass
        rc = self.p.wait(timeout=LINE_TIMEOUT)
        self.err.close()
        return rc

    def kill(self):
        self.p.kill()


def meminfo(probe):
    a = probe("meminfo")
    assert a[1] == "0", a
    return int(a[2]), int(a[3])


def mock_used(world, card=0):
    out = subprocess.run([str(world["paths"]["mockctl"]), str(world["state"])],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(rf"^card {card} .*used_bytes=(\d+)", out, re.M)
    assert m, out
    return int(m.group(1))


def mem_conf(mib=1024, **more):
    conf = {"EGPU_VCUDA_MEMORY_MIB": str(mib)}
    conf.update({f"EGPU_VCUDA_{k.upper()}": str(v) for k, v in more.items()})
    return conf


def log_lines(text):
    return [line for line in text.splitlines() if line.strip()]


# ---- interposition ----

def test_exports_are_the_table_and_dlsym(paths):
    out = subprocess.run(["nm", "-D", "--defined-only", str(paths["lib"])],
                         capture_output=True, text=True, check=True).stdout
    exported = {f[2] for f in (line.split() for line in out.splitlines()) if len(f) == 3}
    table = {name for _, name in hooked_names()}
    assert len(table) == len(hooked_names()), "a name is listed twice in hook_table.h"
    assert exported == table | {"dlsym"}
    needed = subprocess.run(["readelf", "-d", str(paths["lib"])], capture_output=True,
                            text=True, check=True).stdout
    libs = set(re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", needed))
    assert libs <= {"libc.so.6", "libdl.so.2", "libpthread.so.0", "ld-linux-x86-64.so.2",
                    "ld-linux-aarch64.so.1"}, libs


def test_dlsym_gives_wrappers(world):
    probe = Probe(world, lookup="dlsym", conf=UNLIMITED)
    mock_has = {n for lib, n in hooked_names() if lib == "CUDA"} - {"cuDevicePrimaryCtxReset_v2"}
    for lib, name in hooked_names():
        a = probe(f"sym {name}")
        mine = f"libegpu-vcuda.so:{name}"
        # RTLD_DEFAULT finds the preloaded definition; the interposer's own handle too
        assert a[2] == mine and a[4] == mine, a
        # the libcuda handle gives the wrapper when the driver has the name, else NULL
        assert a[3] == (mine if name in mock_has else "-:-"), a
    # everything else is the driver's own
    for name in ("cuMemcpyHtoD_v2", "cuStreamCreate", "cuDeviceGetUuid"):
        a = probe(f"sym {name}")
        assert a[3] == f"libcuda.so.1:{name}", a
        assert a[4] == "-:-", a
    assert probe("rtldnext") == ["rtldnext", "2"]  # RTLD_NEXT relative to its real caller
    assert probe.close() == 0


# (name asked for, CUDA version, flags) -> the exported entry the driver resolves it to
PROC_CASES = [
    ("cuInit", 12040, 0, "cuInit"),
    ("cuGetProcAddress", 11030, 0, "cuGetProcAddress"),
    ("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"),
    ("cuCtxCreate", 11030, 0, "cuCtxCreate_v2"),
    ("cuCtxCreate", 12000, 0, "cuCtxCreate_v3"),
    ("cuCtxCreate", 12050, 0, "cuCtxCreate_v4"),
    ("cuCtxCreate", 13000, 0, "cuCtxCreate_v4"),
    ("cuCtxDestroy", 12040, 0, "cuCtxDestroy_v2"),
    ("cuDevicePrimaryCtxRetain", 11030, 0, "cuDevicePrimaryCtxRetain"),
    ("cuDevicePrimaryCtxRelease", 13000, 0, "cuDevicePrimaryCtxRelease_v2"),
    ("cuCtxSetCurrent", 12040, 0, "cuCtxSetCurrent"),
    ("cuCtxPushCurrent", 12040, 0, "cuCtxPushCurrent_v2"),
    ("cuCtxPopCurrent", 13000, 0, "cuCtxPopCurrent_v2"),
    ("cuMemGetInfo", 11030, 0, "cuMemGetInfo_v2"),
    ("cuDeviceTotalMem", 12040, 0, "cuDeviceTotalMem_v2"),
    ("cuMemAlloc", 11030, 0, "cuMemAlloc_v2"),
    ("cuMemAlloc", 13000, 2, "cuMemAlloc_v2"),
    ("cuMemAllocPitch", 12040, 0, "cuMemAllocPitch_v2"),
    ("cuMemAllocManaged", 12040, 0, "cuMemAllocManaged"),
    ("cuMemFree", 12040, 1, "cuMemFree_v2"),
    ("cuMemCreate", 12040, 0, "cuMemCreate"),
    ("cuMemRelease", 12040, 0, "cuMemRelease"),
    ("cuMemAllocAsync", 11030, 0, "cuMemAllocAsync"),
    ("cuMemAllocAsync", 11030, 2, "cuMemAllocAsync_ptsz"),
    ("cuMemFreeAsync", 12040, 0, "cuMemFreeAsync"),
    ("cuMemFreeAsync", 12040, 2, "cuMemFreeAsync_ptsz"),
    ("cuMemPoolCreate", 12040, 0, "cuMemPoolCreate"),
    ("cuMemPoolDestroy", 12040, 0, "cuMemPoolDestroy"),
    ("cuMemPoolTrimTo", 12040, 0, "cuMemPoolTrimTo"),
    ("cuMemPoolSetAttribute", 12040, 0, "cuMemPoolSetAttribute"),
    ("cuMemAllocFromPoolAsync", 12040, 0, "cuMemAllocFromPoolAsync"),
    ("cuMemAllocFromPoolAsync", 12040, 2, "cuMemAllocFromPoolAsync_ptsz"),
    ("cuArrayCreate", 12040, 0, "cuArrayCreate_v2"),
    ("cuArray3DCreate", 12040, 0, "cuArray3DCreate_v2"),
    ("cuArrayDestroy", 12040, 0, "cuArrayDestroy"),
    ("cuMipmappedArrayCreate", 12040, 0, "cuMipmappedArrayCreate"),
    ("cuMipmappedArrayDestroy", 12040, 0, "cuMipmappedArrayDestroy"),
    ("cuLaunchKernel", 11030, 0, "cuLaunchKernel"),
    ("cuLaunchKernel", 12040, 2, "cuLaunchKernel_ptsz"),
    ("cuLaunchKernelEx", 12040, 0, "cuLaunchKernelEx"),
    ("cuLaunchKernelEx", 13000, 2, "cuLaunchKernelEx_ptsz"),
    ("cuGraphLaunch", 10000, 0, "cuGraphLaunch"),
    ("cuGraphLaunch", 12040, 2, "cuGraphLaunch_ptsz"),
    ("cuLaunchCooperativeKernel", 9000, 0, "cuLaunchCooperativeKernel"),
    ("cuLaunchCooperativeKernel", 12040, 2, "cuLaunchCooperativeKernel_ptsz"),
    ("cuLaunchCooperativeKernelMultiDevice", 12040, 0, "cuLaunchCooperativeKernelMultiDevice"),
    ("cuLaunch", 12040, 0, "cuLaunch"),
    ("cuLaunchGrid", 11030, 0, "cuLaunchGrid"),
    ("cuLaunchGridAsync", 12040, 2, "cuLaunchGridAsync"),
]


@pytest.mark.parametrize("symbolic", [False, True], ids=["mock", "mock-symbolic"])
def test_get_proc_address_gives_wrappers(world, symbolic):
    covered = {want for *_, want in PROC_CASES}
    missing = {n for lib, n in hooked_names() if lib == "CUDA"} - covered
    assert missing == {"cuDevicePrimaryCtxReset_v2"}, missing  # not in the mock driver
    probe = Probe(world, lookup="dlsym", conf=UNLIMITED, symbolic=symbolic)
    for name, version, flags, want in PROC_CASES:
        a = probe(f"procaddr {name} {version} {flags}")
        assert a[1:] == ["0", "0", f"libegpu-vcuda.so:{want}"], (name, version, flags, a)
    # not hooked: the driver's own entry, per-thread variant included
    assert probe("procaddr cuMemcpyHtoD 12040 0")[3] == "libcuda.so.1:cuMemcpyHtoD_v2"
    assert probe("procaddr cuMemsetD8 12040 2")[3] == "libcuda.so.1:cuMemsetD8_v2_ptds"
    assert probe("procaddr cuEventElapsedTime 12080 0")[3] == \
        "libcuda.so.1:cuEventElapsedTime_v2"
    # unknown names and versions too old fail as the driver says
    assert probe("procaddr cuNoSuchThing 12040 0")[1:3] == ["500", "1"]
    assert probe("procaddr cuMemAllocAsync 11000 0")[1:3] == ["500", "2"]
    assert probe.close() == 0


def test_process_without_cuda_untouched(world):
    env = make_env(world, mem_conf(512))
    out = subprocess.run(["/bin/sh", "-c", "echo hello"], env=env, capture_output=True,
                         text=True, timeout=LINE_TIMEOUT)
    assert (out.returncode, out.stdout, out.stderr) == (0, "hello\n", "")
    # dlsym-heavy code (ctypes) works through the wrapper's pass-through
    out = subprocess.run(["/usr/bin/python3", "-c",
                          "import ctypes, ctypes.util; "
                          "m = ctypes.CDLL(ctypes.util.find_library('m')); "
                          "m.cos.restype = ctypes.c_double; "
                          "print(m.cos(ctypes.c_double(0.0)))"],
                         env=env, capture_output=True, text=True, timeout=LINE_TIMEOUT)
    assert (out.returncode, out.stdout, out.stderr) == (0, "1.0\n", "")
    assert not (world["dir"] / "vcuda-memory.shm").exists()


# ---- the memory limit ----

def counted(path, size):
    """What one allocation of the probe's path and size counts (docs/vcuda.md)."""
    if path == "pitch":
        width = size // 64
        return round_up(round_up(width, 512) * 64)  # the mock's pitch: width to 512 bytes
    if path == "array":
        return round_up(1024 * (size // 4096) * 4)
    if path == "array3d":
        return round_up(1024 * 64 * (size // 262144) * 4)
    if path == "mipmap":
        h = size // 4096
        return round_up(4 * (1024 * h + 512 * max(h // 2, 1)))
    return round_up(size)


# sizes chosen so the 2 MiB rounding always adds something
PATH_SIZES = {
    "mem": 99 * MIB + 1,
    "pitch": 64 * 1000000,  # width 1000000: pitch 1000448
    "managed": 99 * MIB + 1,
    "vmm": 99 * MIB + 1,
    "async": 99 * MIB + 1,
    "async_ptsz": 99 * MIB + 1,
    "pool": 99 * MIB + 1,
    "pool_ptsz": 99 * MIB + 1,
    "array": 99 * MIB + 4096,
    "array3d": 99 * MIB + 262144,
    "mipmap": 79 * MIB,
}

LOOKUPS = [("direct", False), ("dlsym", False), ("procaddr", False), ("procaddr", True)]


@pytest.mark.parametrize("lookup,symbolic", LOOKUPS,
                         ids=["direct", "dlsym", "procaddr", "procaddr-symbolic"])
@pytest.mark.parametrize("path", list(PATH_SIZES))
def test_limit_every_path(world, path, lookup, symbolic):
    limit = 1024 * MIB
    size = PATH_SIZES[path]
    one = counted(path, size)
    assert one % GRAN == 0 and one > size // 2
    probe = Probe(world, lookup=lookup, conf=mem_conf(1024), symbolic=symbolic)
    assert probe.rc("init") == 0
    assert probe.rc("ctx 0 primary") == 0
    room = limit - CTX_MIB * MIB
    assert meminfo(probe) == (room, limit)
    want = room // one
    assert probe("fill %s %d" % (path, size)) == ["fill", str(want), str(OOM)]
    free, total = meminfo(probe)
    assert (free, total) == (room - want * one, limit)
    # the refused allocation took nothing in the driver either
    assert mock_used(world) == CTX_MIB * MIB + want * one
    # frees give it all back, and the same fill fits again
    assert probe("freeall") == ["freeall", str(want), "0"]
    assert meminfo(probe) == (room, limit)
    assert probe("fill %s %d" % (path, size)) == ["fill", str(want), str(OOM)]
    assert probe.close() == 0


def test_limit_exact_remainder(world):
    probe = Probe(world, conf=mem_conf(1024))
    assert probe.rc("init") == 0 and probe.rc("ctx 0 primary") == 0
    assert probe("fill mem %d" % (100 * MIB)) == ["fill", "7", str(OOM)]
    assert meminfo(probe)[0] == 24 * MIB
    assert probe.rc("alloc mem %d" % (24 * MIB)) == 0  # exactly the rest fits
    assert probe.rc("alloc mem 1") == OOM  # 1 byte counts 2 MiB
    assert meminfo(probe)[0] == 0
    assert probe.rc("free 0") == 0
    assert probe.rc("alloc mem %d" % (98 * MIB + 1)) == 0
    assert probe.rc("alloc mem 1") == OOM
    assert probe.close() == 0


def test_contexts_count(world):
    probe = Probe(world, conf=mem_conf(1024))
    assert probe.rc("init") == 0
    full = 1024 * MIB
    assert probe.rc("ctx 0 v2") == 0
    assert meminfo(probe)[0] == full - 300 * MIB
    assert probe.rc("ctx 0 v3") == 0
    assert probe.rc("ctx 0 v4") == 0
    assert meminfo(probe)[0] == full - 900 * MIB
    assert probe.rc("ctx 0 primary") == OOM  # a fourth context would pass the limit
    assert mock_used(world) == 900 * MIB
    # memory allocated in a context comes back when the context goes
    assert probe.rc("alloc mem %d" % (100 * MIB)) == 0
    assert meminfo(probe)[0] == full - 1000 * MIB
    assert probe.rc("ctxdestroy") == 0
    assert meminfo(probe)[0] == full - 600 * MIB
    # the primary context counts once, however often it is retained
    assert probe.rc("ctx 0 primary") == 0
    assert probe.rc("ctx 0 primary") == 0
    assert meminfo(probe)[0] == full - 900 * MIB
    assert probe.rc("alloc mem %d" % (50 * MIB)) == 0
    assert probe.rc("ctxdestroy") == 0  # one release: still retained
    assert meminfo(probe)[0] == full - 950 * MIB
    assert probe.rc("ctxdestroy") == 0  # the last release frees it and its memory
    assert meminfo(probe)[0] == full - 600 * MIB
    assert probe.close() == 0


def test_context_mib_setting(world):
    probe = Probe(world, conf=mem_conf(1024, context_mib=100))
    assert probe.rc("init") == 0 and probe.rc("ctx 0 primary") == 0
    assert meminfo(probe) == (924 * MIB, 1024 * MIB)
    assert probe.close() == 0


def test_context_footprint_is_measured(world):
    """No EGPU_VCUDA_CONTEXT_MIB: a context counts what it really took (the
    card's free memory before and after, through NVML), so the limit holds in
    device memory. A 300 MiB constant let real use pass 1024 MiB by 224."""
    conf = mem_conf(1024)
    conf["EGPU_MOCK_CUDA_CONTEXT_MIB"] = "524"
    probe = Probe(world, conf=conf)
    assert probe.rc("init") == 0 and probe.rc("ctx 0 primary") == 0
    assert mock_used(world) == 524 * MIB
    assert meminfo(probe) == (500 * MIB, 1024 * MIB)
    assert probe("fill mem %d" % (100 * MIB)) == ["fill", "5", str(OOM)]
    assert mock_used(world) == 1024 * MIB  # real use reaches the limit, never passes it
    assert probe("freeall") == ["freeall", "5", "0"]
    assert probe.rc("ctx 0 v2") == OOM  # a second 524 MiB context does not fit 500
    assert mock_used(world) == 524 * MIB
    assert probe.close() == 0
    # a second process measures its own, with the first one's context still there
    conf["EGPU_VCUDA_MEMORY_MIB"] = "2048"
    a, b = Probe(world, conf=conf), Probe(world, conf=conf)
    assert a.rc("init") == 0 and a.rc("ctx 0 primary") == 0 and a.rc("ctx 0 v2") == 0
    assert b.rc("init") == 0 and b.rc("ctx 0 primary") == 0
    assert meminfo(a) == (2048 * MIB - 3 * 524 * MIB, 2048 * MIB)
    # b's next context is checked against what b measured: 4 x 524 > 2048
    assert b.rc("ctx 0 v2") == OOM
    assert mock_used(world) == 3 * 524 * MIB
    assert a.close() == 0 and b.close() == 0


def test_context_measured_never_below_the_model(world):
    """A measured drop smaller than the model's figure (300 MiB for the mock's
    A100s) is not believed: a process of the container freeing memory while
    another's context is measured (the lock holds only context creations)
    would make the drop small and that context's charge with it. Real use
    then stays under the limit, never over it."""
    conf = mem_conf(1024)
    conf["EGPU_MOCK_CUDA_CONTEXT_MIB"] = "100"
    probe = Probe(world, conf=conf)
    assert probe.rc("init") == 0 and probe.rc("ctx 0 primary") == 0
    assert mock_used(world) == 100 * MIB
    assert meminfo(probe) == (724 * MIB, 1024 * MIB)  # counted 300, not the 100 measured
    assert probe.close() == 0


def test_context_mib_overrides_measuring(world):
    conf = mem_conf(1024, context_mib=300)
    conf["EGPU_MOCK_CUDA_CONTEXT_MIB"] = "524"
    probe = Probe(world, conf=conf)
    assert probe.rc("init") == 0 and probe.rc("ctx 0 primary") == 0
    assert meminfo(probe) == (724 * MIB, 1024 * MIB)  # configured: counted as given
    assert probe.close() == 0


def test_context_extra_mib(world):
    """EGPU_VCUDA_CONTEXT_EXTRA_MIB: what the driver takes beyond a context as
    measured (module code loaded lazily at a kernel's first launch: about
    95 MiB for PyTorch 2.11) is added to the first context a process makes
    on a card, so allocations stop that much earlier; the process's other
    contexts on the card are not charged it again, and it comes back with
    the last one."""
    conf = mem_conf(1024, context_extra_mib=96)
    conf["EGPU_MOCK_CUDA_CONTEXT_MIB"] = "524"
    probe = Probe(world, conf=conf)
    assert probe.rc("init") == 0 and probe.rc("ctx 0 primary") == 0
    assert mock_used(world) == 524 * MIB  # the driver took the context only
    assert meminfo(probe) == ((1024 - 524 - 96) * MIB, 1024 * MIB)  # used: measured + 96
    assert probe("fill mem %d" % (4 * MIB)) == ["fill", str(404 // 4), str(OOM)]  # not 125
    assert mock_used(world) == (1024 - 96) * MIB  # room left for the lazily loaded code
    assert probe("freeall") == ["freeall", str(404 // 4), "0"]
    assert probe.rc("ctx 0 primary") == 0  # retained again: nothing more
    assert meminfo(probe)[0] == 404 * MIB
    assert probe.rc("ctxdestroy") == 0 and probe.rc("ctxdestroy") == 0  # the last release
    assert mock_used(world) == 0
    assert probe.rc("ctx 0 primary") == 0  # the extra came back, and is taken again once
    assert meminfo(probe)[0] == 404 * MIB
    assert probe.close() == 0
    # a second context of the same process on the card: its own footprint only
    conf["EGPU_VCUDA_MEMORY_MIB"] = "2048"
    probe = Probe(world, conf=conf)
    assert probe.rc("init") == 0 and probe.rc("ctx 0 v2") == 0
    assert meminfo(probe)[0] == (2048 - 524 - 96) * MIB
    assert probe.rc("ctx 0 primary") == 0
    assert meminfo(probe)[0] == (2048 - 2 * 524 - 96) * MIB
    assert probe.rc("ctxdestroy") == 0  # the primary goes; the v2 context still holds it
    assert meminfo(probe)[0] == (2048 - 524 - 96) * MIB
    assert probe.rc("ctxdestroy") == 0  # the last context goes, and the extra with it
    assert mock_used(world) == 0
    assert probe.rc("ctx 0 v3") == 0
    assert meminfo(probe)[0] == (2048 - 524 - 96) * MIB
    assert probe.close() == 0
    # each process is charged it once: two processes, 2 x (524 + 96)
    a, b = Probe(world, conf=conf), Probe(world, conf=conf)
    assert a.rc("init") == 0 and a.rc("ctx 0 primary") == 0
    assert b.rc("init") == 0 and b.rc("ctx 0 primary") == 0
    assert meminfo(a)[0] == (2048 - 2 * (524 + 96)) * MIB
    assert a.close() == 0 and b.close() == 0


def test_context_extra_mib_refuses_a_context(world):
    """A context that fits alone but not with the extra is refused, released
    again, and nothing stays counted; a later one that fits is charged the
    extra once."""
    conf = mem_conf(600, context_extra_mib=96)
    conf["EGPU_MOCK_CUDA_CONTEXT_MIB"] = "524"
    a = Probe(world, conf=conf)
    assert a.rc("init") == 0
    assert a.rc("ctx 0 primary") == OOM  # 524 + 96 > 600
    assert a.rc("ctx 0 v2") == OOM
    assert a.rc("ctx 0 primary") == OOM  # the failed tries left nothing behind
    assert mock_used(world) == 0  # made, measured, released again
    # a, still running, holds nothing: b's context with 76 MiB extra fills the limit exactly
    b = Probe(world, conf=dict(conf, EGPU_VCUDA_CONTEXT_EXTRA_MIB="76"))
    assert b.rc("init") == 0 and b.rc("ctx 0 primary") == 0
    assert meminfo(b) == (0, 600 * MIB)
    assert a.close() == 0 and b.close() == 0


def test_context_extra_mib_adds_to_context_mib(world):
    """With EGPU_VCUDA_CONTEXT_MIB set (counted as given), the extra adds to it."""
    conf = mem_conf(1024, context_mib=300, context_extra_mib=96)
    conf["EGPU_MOCK_CUDA_CONTEXT_MIB"] = "524"
    probe = Probe(world, conf=conf)
    assert probe.rc("init") == 0 and probe.rc("ctx 0 primary") == 0
    assert meminfo(probe) == ((1024 - 300 - 96) * MIB, 1024 * MIB)
    assert probe.close() == 0


@pytest.mark.parametrize("name,want_mib", [("NVIDIA H100 80GB HBM3", 524),
                                           ("NVIDIA A100-SXM4-80GB", 300)])
def test_context_by_model_without_nvml(world, tmp_path, name, want_mib):
    """Without NVML nothing can be measured: the model's figure counts."""
    lib = tmp_path / "cuda-only"
    lib.mkdir()
    (lib / "libcuda.so.1").symlink_to(world["paths"]["mock"] / "libcuda.so.1")
    conf = mem_conf(1024)
    conf.update({"LD_LIBRARY_PATH": str(lib), "EGPU_MOCK_CUDA_CONTEXT_MIB": "524",
                 "EGPU_MOCK_NVML_GPUS": f"{name}:81559:{UUID0}"})
    probe = Probe(world, conf=conf)
    assert probe.rc("init") == 0 and probe.rc("ctx 0 primary") == 0
    assert meminfo(probe)[0] == (1024 - want_mib) * MIB
    assert probe.close() == 0


# A driver-API client through ctypes (dlsym of the interposer's wrappers):
# memory pools, which vcuda_probe does not drive. One line per step:
# "<step> <CUresult> <the mock card's real used bytes> <free cuMemGetInfo reports>".
POOL_CLIENT = r"""
import ctypes, os, re, subprocess, sys
from ctypes import byref, c_int, c_size_t, c_uint64, c_void_p
cu = ctypes.CDLL("libcuda.so.1")
MIB = 1 << 20

class Props(ctypes.Structure):  # CUmemPoolProps
    _fields_ = [("allocType", c_int), ("handleTypes", c_int), ("locType", c_int),
                ("locId", c_int), ("win32", c_void_p), ("maxSize", c_size_t),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 54)]

def used():
    out = subprocess.run([os.environ["MOCKCTL"], os.environ["EGPU_MOCK_CUDA_STATE"]],
                         capture_output=True, text=True, check=True).stdout
    return int(re.search(r"^card 0 .*used_bytes=(\d+)", out, re.M).group(1))

def say(step, rc):
    free, total = c_size_t(), c_size_t()
    assert cu.cuMemGetInfo_v2(byref(free), byref(total)) == 0
    print(step, rc, used(), free.value, flush=True)

assert cu.cuInit(0) == 0
ctx = c_void_p()
assert cu.cuDevicePrimaryCtxRetain(byref(ctx), 0) == 0 and cu.cuCtxSetCurrent(ctx) == 0
dflt = c_void_p()
assert cu.cuDeviceGetDefaultMemPool(byref(dflt), 0) == 0
keep_all = c_uint64(2**64 - 1)
assert cu.cuMemPoolSetAttribute(dflt, 4, byref(keep_all)) == 0  # RELEASE_THRESHOLD
# 1. small blocks: the pool reserves 32 MiB chunks, more than is allocated
ptrs, rc = [], 0
while rc == 0:
    p = c_uint64()
    rc = cu.cuMemAllocAsync(byref(p), c_size_t(1), None)
    if rc == 0:
        ptrs.append(p.value)
say("small %d" % len(ptrs), rc)
# 2. all freed: the pool keeps it all reserved (threshold UINT64_MAX)
for p in ptrs:
    assert cu.cuMemFreeAsync(c_uint64(p), None) == 0
say("freed", 0)
# 3. another pool cannot take what the default pool still holds
props = Props(allocType=1, locType=1, locId=0)
pool = c_void_p()
assert cu.cuMemPoolCreate(byref(pool), byref(props)) == 0
big = c_uint64()
say("other", cu.cuMemAllocFromPoolAsync(byref(big), c_size_t(1024 * MIB), pool, None))
# 4. trimming the default pool gives its reservation back
assert cu.cuMemPoolTrimTo(dflt, c_size_t(0)) == 0
say("trimmed", 0)
say("other", cu.cuMemAllocFromPoolAsync(byref(big), c_size_t(1024 * MIB), pool, None))
# 5. freed under a high threshold, released when it is lowered
assert cu.cuMemPoolSetAttribute(pool, 4, byref(keep_all)) == 0
assert cu.cuMemFreeAsync(big, None) == 0
say("kept", 0)
assert cu.cuMemPoolSetAttribute(pool, 4, byref(c_uint64(0))) == 0
say("released", 0)
assert cu.cuMemPoolDestroy(pool) == 0
"""


def test_pool_reservation_counted(world):
    """A pool's reservation counts, not just what is allocated from it: with
    the release threshold at UINT64_MAX and 32 MiB chunks the card's real
    use never passes the 4096 MiB limit. Counting allocations alone let it
    reach 4108 MiB at step 1 and 5132 MiB at step 3."""
    limit = 4096 * MIB
    env = make_env(world, dict(mem_conf(4096), EGPU_MOCK_CUDA_POOL_CHUNK_MIB="32",
                               MOCKCTL=str(world["paths"]["mockctl"])))
    out = subprocess.run([os.sys.executable, "-c", POOL_CLIENT], env=env, text=True,
                         capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr
    steps = [line.split() for line in out.stdout.splitlines()]
    for step in steps:
        assert int(step[-2]) <= limit, steps  # the real device memory, at every step
    ctx = CTX_MIB * MIB
    small = steps[0]
    # 32 MiB chunks within 4096 - 300 MiB: 118 chunks of 16 two-MiB blocks
    assert small[:3] == ["small", str(118 * 16), str(OOM)], small
    assert int(small[3]) == ctx + 118 * 32 * MIB and int(small[4]) == limit - int(small[3])
    assert steps[1][2:] == small[3:]  # nothing released: all still reserved
    assert steps[2][1:3] == [str(OOM), small[3]], steps[2]
    assert steps[3][2:] == [str(ctx), str(limit - ctx)]  # trimmed: given back
    assert steps[4][1:3] == ["0", str(ctx + 1024 * MIB)]
    assert steps[5][2:] == [str(ctx + 1024 * MIB), str(limit - ctx - 1024 * MIB)]  # kept
    assert steps[6][2:] == [str(ctx), str(limit - ctx)]  # released


def test_memory_queries_report_the_limit(world):
    probe = Probe(world, conf=mem_conf(2048))
    assert probe.rc("init") == 0 and probe.rc("ctx 0 primary") == 0
    assert probe.rc("alloc mem %d" % (500 * MIB)) == 0
    used = 800 * MIB
    assert meminfo(probe) == (2048 * MIB - used, 2048 * MIB)
    assert probe("totalmem 0") == ["totalmem", "0", str(2048 * MIB)]
    assert probe("totalmem 1") == ["totalmem", "0", str(2048 * MIB)]  # every card without a list
    nv = probe("nvml 0")
    assert nv[1:] == ["0", str(2048 * MIB), str(2048 * MIB - used), str(used),
                      "0", str(2048 * MIB), "0", str(2048 * MIB - used), str(used)], nv
    nv = probe("nvml 1")
    assert nv[1:5] == ["0", str(2048 * MIB), str(2048 * MIB), "0"], nv
    assert probe.close() == 0


def test_only_listed_cards_are_limited(world):
    probe = Probe(world, conf=mem_conf(1024, gpus=UUID1))
    assert probe.rc("init") == 0
    assert probe("totalmem 0") == ["totalmem", "0", str(CARD_BYTES)]
    assert probe("totalmem 1") == ["totalmem", "0", str(1024 * MIB)]
    assert probe.rc("ctx 0 primary") == 0
    assert probe.rc("alloc mem %d" % (4096 * MIB)) == 0  # card 0: not limited
    assert meminfo(probe)[1] == CARD_BYTES
    assert probe("nvml 0")[2] == str(CARD_BYTES)
    assert probe.rc("ctx 1 primary") == 0
    assert probe("fill mem %d" % (100 * MIB)) == ["fill", "7", str(OOM)]
    assert meminfo(probe) == (24 * MIB, 1024 * MIB)
    assert probe("nvml 1")[1:5] == ["0", str(1024 * MIB), str(24 * MIB), str(1000 * MIB)]
    assert probe.close() == 0


def test_reports_never_underflow(world):
    """A process whose limit is below what the container already uses (two
    configurations on one directory) sees a full card, not a wrapped one."""
    a = Probe(world, conf=mem_conf(2048))
    assert a.rc("init") == 0 and a.rc("ctx 0 primary") == 0
    assert a.rc("alloc mem %d" % (1500 * MIB)) == 0
    b = Probe(world, conf=mem_conf(1024, context_mib=0))
    assert b.rc("init") == 0 and b.rc("ctx 0 primary") == 0
    assert meminfo(b) == (0, 1024 * MIB)
    assert b("nvml 0")[1:5] == ["0", str(1024 * MIB), "0", str(1024 * MIB)]
    assert b.rc("alloc mem 1") == OOM
    assert a.close() == 0 and b.close() == 0


# ---- processes ----

def test_four_processes_share_one_limit(world):
    limit, chunk = 2048 * MIB, 64 * MIB
    probes = [Probe(world, conf=mem_conf(2048)) for _ in range(4)]
    for p in probes:
        assert p.rc("init") == 0 and p.rc("ctx 0 primary") == 0
    for p in probes:
        p.send("fill mem %d" % chunk)
    counts = []
    for p in probes:
        a = p.read()
        assert a[0] == "fill" and a[2] == str(OOM), a
        counts.append(int(a[1]))
    room = limit - 4 * CTX_MIB * MIB
    assert sum(counts) == room // chunk, counts
    assert meminfo(probes[0]) == (room - sum(counts) * chunk, limit)
    assert mock_used(world) == 4 * CTX_MIB * MIB + sum(counts) * chunk
    for p in probes:
        assert p.close() == 0
    # clean exits give their usage back at once
    last = Probe(world, conf=mem_conf(2048))
    assert last.rc("init") == 0 and last.rc("ctx 0 primary") == 0
    assert meminfo(last) == (limit - CTX_MIB * MIB, limit)
    assert last.close() == 0


def test_threads_share_the_limit(world):
    """Eight threads of one process allocating at once never pass the limit
    together, and every free gives its share back."""
    probe = Probe(world, conf=mem_conf(2048))
    assert probe.rc("init") == 0 and probe.rc("ctx 0 primary") == 0
    room = 2048 * MIB - CTX_MIB * MIB
    for _ in range(3):
        assert probe("threads 8 %d" % (16 * MIB)) == ["threads", str(room // (16 * MIB)), "0"]
        assert meminfo(probe) == (room, 2048 * MIB)
    assert probe.close() == 0


def test_sigkilled_memory_returns_within_a_second(world):
    a = Probe(world, conf=mem_conf(2048))
    b = Probe(world, conf=mem_conf(2048))
    assert a.rc("init") == 0 and a.rc("ctx 0 primary") == 0
    assert a.rc("alloc mem %d" % (1400 * MIB)) == 0
    assert b.rc("init") == 0 and b.rc("ctx 0 primary") == 0
    assert b.rc("alloc mem %d" % (1000 * MIB)) == OOM
    a.kill()  # SIGKILL, not reaped yet: a zombie holds no device memory
    killed = time.monotonic()
    while True:
        rc = b.rc("alloc mem %d" % (1000 * MIB))
        elapsed = time.monotonic() - killed
        if rc == 0 or elapsed > 5:
            break
        time.sleep(0.01)
    assert rc == 0
    assert elapsed < 1.0, f"memory came back after {elapsed:.3f} s"
    assert meminfo(b) == (2048 * MIB - 1300 * MIB, 2048 * MIB)
    assert a.p.wait(timeout=LINE_TIMEOUT) == -signal.SIGKILL
    a.err.close()
    assert b.close() == 0


def test_fork_child_counted_parent_kept(world):
    probe = Probe(world, conf=mem_conf(2048))
    assert probe.rc("init") == 0 and probe.rc("ctx 0 primary") == 0
    assert probe.rc("alloc mem %d" % (500 * MIB)) == 0
    parent_used = 800 * MIB
    assert meminfo(probe)[0] == 2048 * MIB - parent_used
    probe.send("fork mem %d" % (300 * MIB))
    lines = [probe.read() for _ in range(5)]
    assert lines[0] == ["child", "init", "0"]
    assert lines[1] == ["child", "ctx", "0"]
    assert lines[2] == ["child", "alloc", "0"]
    # the child sees its own context and allocation on top of the parent's
    assert lines[3] == ["child", "meminfo", "0", str(2048 * MIB - parent_used - 600 * MIB),
                        str(2048 * MIB)]
    assert lines[4] == ["fork", "0"]
    assert meminfo(probe)[0] == 2048 * MIB - parent_used  # parent's kept, child's returned
    # a child that would pass the limit together with its parent is refused
    probe.send("fork mem %d" % (1000 * MIB))
    lines = [probe.read() for _ in range(5)]
    assert lines[2] == ["child", "alloc", str(OOM)]
    assert meminfo(probe)[0] == 2048 * MIB - parent_used
    assert probe.close() == 0


# ---- bad input ----

def assert_refused(probe, cards=(0, 1)):
    """Every CUDA call of probe is refused and the driver never ran."""
    assert probe.rc("init") == NOT_PERMITTED
    for card in cards:
        assert probe.rc(f"ctx {card} primary") == NOT_INITIALIZED
        assert probe.rc(f"ctx {card} v2") == NOT_INITIALIZED
        assert probe("totalmem %d" % card)[1] == str(NOT_INITIALIZED)
    assert probe.rc("alloc mem 1") == NOT_INITIALIZED
    assert probe.rc("alloc managed %d" % (10 * 1024 * MIB)) == NOT_INITIALIZED
    assert probe("meminfo")[1] == str(NOT_INITIALIZED)
    assert probe.rc("launch") != 0
    assert int(probe("nvml 0")[5]) == NVML_LIBRARY_NOT_FOUND  # the hooked v2 query
    calls = dict(c.split("=") for c in probe("calls")[1:] if "=" in c)
    assert calls.get("cuInit", "0") == "0", calls  # the real driver was never initialised
    assert "cuMemAlloc_v2" not in calls and "cuLaunchKernel" not in calls, calls


def test_no_configuration_refuses_every_call(world):
    """The allocation directory hidden (a tmpfs over /etc/elastic-gpu in a
    namespace of the container's own): no limit is known, so nothing runs."""
    probe = Probe(world)
    assert_refused(probe)
    assert probe.close() == 0  # never a crash
    lines = log_lines(probe.stderr())
    assert len(lines) == 1, lines
    assert lines[0].startswith("E") and re.search(r"egpu-vcuda\[\d+\]", lines[0]), lines[0]
    for word in ("no configuration", "/etc/elastic-gpu/vcuda.conf", "EGPU_VCUDA_DIR",
                 "refusing every CUDA call", "CUDA_ERROR_NOT_PERMITTED"):
        assert word in lines[0], (word, lines[0])
    assert not (world["dir"] / "vcuda-memory.shm").exists()
    # a CUDA 11.3+ runtime looks cuInit up with cuGetProcAddress_v2: refused too
    p = world["paths"]
    out = subprocess.run([str(p["probe"]), "--lookup", "procaddr"], input="init\n",
                         env=make_env(world), capture_output=True, text=True,
                         timeout=LINE_TIMEOUT)
    assert out.returncode == 1 and out.stdout == "", out
    assert "refusing every CUDA call" in out.stderr, out.stderr
    assert re.search(r"cuGetProcAddress_v2 \w+ \d+: %d" % NOT_INITIALIZED, out.stderr), out.stderr
    # a process that never touches CUDA is not disturbed, and says nothing
    out = subprocess.run(["/bin/sh", "-c", "echo hello"], env=make_env(world),
                         capture_output=True, text=True, timeout=LINE_TIMEOUT)
    assert (out.returncode, out.stdout, out.stderr) == (0, "hello\n", "")


def test_hidden_configuration_ignores_the_environment(world, tmp_path):
    """Loaded through the agent's /etc/ld.so.preload (here
    a list named by EGPU_LD_SO_PRELOAD, which can only add that), with
    /etc/elastic-gpu hidden, neither EGPU_VCUDA_* limits nor a vcuda.conf of
    the tenant's in $EGPU_VCUDA_DIR stand in for the agent's file: every
    CUDA call is refused. Without the list, the same variables configure it
    (use without Kubernetes)."""
    p = world["paths"]
    preload = tmp_path / "ld.so.preload"
    preload.write_text("/usr/lib/other.so\n" + str(p["lib"]) + "\n")
    (world["dir"] / "vcuda.conf").write_text(agent_conf(999999))
    probe = Probe(world, conf={"EGPU_LD_SO_PRELOAD": str(preload)})
    assert_refused(probe)
    assert probe.close() == 0
    lines = log_lines(probe.stderr())
    assert len(lines) == 1, lines
    for word in ("no configuration", "/etc/elastic-gpu/vcuda.conf",
                 "/etc/ld.so.preload loads the interposer", "refusing every CUDA call"):
        assert word in lines[0], (word, lines[0])
    (world["dir"] / "vcuda.conf").unlink()
    probe = Probe(world, conf=dict(mem_conf(999999), EGPU_LD_SO_PRELOAD=str(preload)))
    assert_refused(probe)
    assert probe.close() == 0
    # a list that names another library proves nothing: the variables count
    preload.write_text("/usr/lib/other.so\n")
    probe = Probe(world, conf=dict(mem_conf(1024), EGPU_LD_SO_PRELOAD=str(preload)))
    assert probe.rc("init") == 0 and probe.rc("ctx 0 primary") == 0
    assert probe.close() == 0


def agent_conf(memory_mib, core=100, gpus=UUID0):
    """vcuda.conf exactly as egpu-agent writes it (src/agent/container.c)."""
    return ("# Written by egpu-agent for pod default/p container c; read by libegpu-vcuda.so.\n"
            f"EGPU_VCUDA_GPUS={gpus}\nEGPU_VCUDA_MEMORY_MIB={memory_mib}\n"
            f"EGPU_VCUDA_CORE={core}\nEGPU_VCUDA_CORE_LIMIT={core}\n")


def test_agent_written_config(world):
    (world["dir"] / "vcuda.conf").write_text(agent_conf(1024))
    # the file wins over every variable (the log level too: nothing is logged)
    probe = Probe(world, conf=mem_conf(99999, log_level="debug"))
    assert probe.rc("init") == 0 and probe.rc("ctx 0 primary") == 0
    assert probe("fill mem %d" % (100 * MIB)) == ["fill", "7", str(OOM)]
    assert probe("totalmem 1") == ["totalmem", "0", str(CARD_BYTES)]  # not in the file's list
    assert probe.close() == 0
    assert probe.stderr() == ""
    # memory 0 with a share of one card: the scheduler booked 0 MiB, so this
    # is a broken configuration, never "no memory limit"
    (world["dir"] / "vcuda.conf").write_text(agent_conf(0, core=30))
    probe = Probe(world)
    assert_refused(probe)
    assert probe.close() == 0
    lines = log_lines(probe.stderr())
    assert len(lines) == 1 and "refusing every CUDA call" in lines[0], lines
    # memory 0 on a whole card: all of the card's memory
    (world["dir"] / "vcuda.conf").write_text(agent_conf(0, core=100))
    probe = Probe(world)
    assert probe.rc("init") == 0 and probe.rc("ctx 0 primary") == 0
    assert probe.rc("alloc mem %d" % (10 * 1024 * MIB)) == 0
    assert probe("totalmem 0") == ["totalmem", "0", str(CARD_BYTES)]
    assert probe.rc("launch") == 0
    assert probe.close() == 0
    assert log_lines(probe.stderr()) == []


BAD_CONFS = [
    ("garbage", b"\x7fELF\x02\x01\x01\x02\n", "line 1"),
    ("binary", b"EGPU_VCUDA_MEMORY_MIB=4096\n\x00\x00\x00\n", "NUL"),
    ("truncated", b"EGPU_VCUDA_GPUS=%s\nEGPU_VCUDA_MEMORY_MIB=40" % UUID0.encode(), "truncated"),
    ("missing", b"EGPU_VCUDA_GPUS=%s\nEGPU_VCUDA_MEMORY_MIB=4096\n" % UUID0.encode(),
     "EGPU_VCUDA_CORE missing"),
    ("unknown", b"EGPU_VCUDA_GPUS=%s\nEGPU_VCUDA_MEMORY_MIB=4096\nEGPU_VCUDA_CORE=30\n"
     b"EGPU_VCUDA_MEMORY_LIMIT=1\n" % UUID0.encode(), "EGPU_VCUDA_MEMORY_LIMIT"),
    ("number", b"EGPU_VCUDA_GPUS=%s\nEGPU_VCUDA_MEMORY_MIB=4GiB\nEGPU_VCUDA_CORE=30\n"
     % UUID0.encode(), "EGPU_VCUDA_MEMORY_MIB"),
    ("range", b"EGPU_VCUDA_GPUS=%s\nEGPU_VCUDA_MEMORY_MIB=4096\nEGPU_VCUDA_CORE=130\n"
     % UUID0.encode(), "allowed 1..100"),
    ("unreadable", None, "unreadable"),
]


@pytest.mark.parametrize("name,content,word", BAD_CONFS, ids=[c[0] for c in BAD_CONFS])
def test_broken_config_fails_closed(world, name, content, word):
    conf = world["dir"] / "vcuda.conf"
    if content is None:
        conf.mkdir()  # a directory where the file should be: it cannot be read
    else:
        conf.write_bytes(content)
    # the environment would allow everything: the broken file still wins
    probe = Probe(world, conf=mem_conf(99999))
    assert_refused(probe)  # every card, the ones the file did not list too
    assert probe.close() == 0  # never a crash
    lines = log_lines(probe.stderr())
    assert len(lines) == 1, lines
    assert str(conf) in lines[0] and word in lines[0] and "failing closed" in lines[0], lines
    assert "refusing every CUDA call (cuInit returns CUDA_ERROR_NOT_PERMITTED)" in lines[0]
    assert re.search(r"egpu-vcuda\[\d+\]", lines[0]), lines[0]
    assert lines[0].startswith("E"), lines[0]


def test_bad_environment_fails_closed(world):
    probe = Probe(world, conf={"EGPU_VCUDA_MEMORY_MIB": "lots"})
    assert_refused(probe)
    assert probe.close() == 0
    lines = log_lines(probe.stderr())
    assert len(lines) == 1 and "EGPU_VCUDA_MEMORY_MIB" in lines[0] and "environment" in lines[0]
    assert "refusing every CUDA call" in lines[0], lines


def break_region(region, how):
    data = bytearray(region.read_bytes())
    if how == "garbage":
        data[0:64] = b"\xa5" * 64
    elif how == "truncated":
        data = data[:100]
    elif how == "version":
        data[8:12] = (99).to_bytes(4, "little")
    elif how == "zeroed":
        data = bytearray(len(data))
    region.write_bytes(bytes(data))


REGION_CASES = [("garbage", "corrupted"), ("truncated", "truncated"),
                ("version", "another version"), ("zeroed", "corrupted")]


@pytest.mark.parametrize("how,word", REGION_CASES, ids=[c[0] for c in REGION_CASES])
def test_broken_region_reinitialised(world, how, word):
    region = world["dir"] / "vcuda-memory.shm"
    first = Probe(world, conf=mem_conf(1024))
    assert first.rc("init") == 0 and first.rc("ctx 0 primary") == 0
    assert first.close() == 0
    break_region(region, how)
    probe = Probe(world, conf=mem_conf(1024))
    assert probe.rc("init") == 0 and probe.rc("ctx 0 primary") == 0
    assert probe("fill mem %d" % (100 * MIB)) == ["fill", "7", str(OOM)]
    assert probe.close() == 0
    lines = log_lines(probe.stderr())
    assert len(lines) == 1, lines
    assert str(region) in lines[0] and word in lines[0] and "re-initialising" in lines[0]


def test_live_process_registers_again(world):
    region = world["dir"] / "vcuda-memory.shm"
    a = Probe(world, conf=mem_conf(2048))
    assert a.rc("init") == 0 and a.rc("ctx 0 primary") == 0
    assert a.rc("alloc mem %d" % (500 * MIB)) == 0
    break_region(region, "garbage")
    b = Probe(world, conf=mem_conf(2048))
    assert b.rc("init") == 0
    # the re-initialisation kept a's slot, unconfirmed: nothing is reserved
    # until a has registered its usage again (a reset gives no memory)
    assert b.rc("ctx 0 primary") == OOM
    meminfo(a)  # a's next call sees the new generation and registers its 800 MiB again
    assert b.rc("ctx 0 primary") == 0
    assert meminfo(b)[0] == 2048 * MIB - 1100 * MIB
    assert b.rc("alloc mem %d" % (1000 * MIB)) == OOM  # the limit holds for both again
    assert a.close() == 0 and b.close() == 0
    assert log_lines(a.stderr()) == []
    lines = log_lines(b.stderr())
    assert len(lines) == 1 and "re-initialising" in lines[0], lines


# ---- the compute limit: graphs, stream capture, the region under truncation ----

def mockctl(world, *args):
    return subprocess.run([str(world["paths"]["mockctl"]), str(world["state"]), *args],
                          capture_output=True, text=True, check=True).stdout


def card_share(world, seconds, card=0):
    """Percent of card's time busy over the next seconds (mock device time)."""
    mockctl(world, "reset-busy")
    t0 = time.monotonic_ns()
    time.sleep(seconds)
    out = mockctl(world)
    now = int(re.search(r"^now_ns=(\d+)", out, re.M).group(1))
    busy = int(re.search(rf"^card {card} .*busy_ns=(\d+)", out, re.M).group(1))
    return 100.0 * busy / (now - t0)


def runqueue_wait_ns(pid):
    """Nanoseconds the threads of process pid have spent runnable but
    waiting for a CPU, summed (the second field of each thread's
    /proc/<pid>/task/<tid>/schedstat); 0 where the kernel does not say."""
    total = 0
    try:
        tasks = list(pathlib.Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return 0
    for task in tasks:
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            pass  # a thread that just exited, or no schedstat
    return total


def held_share(world, probe, seconds, card=0, most=30.0):
    """(percent of card's time busy, percent of the probe's own time, seconds
    the probe waited for a CPU) over a window that lasts until the probe has
    had seconds of wall time not spent waiting for a CPU (at most most
    seconds; mock device time).

    The card is fed by the probe: while its launching thread waits for a
    CPU (a loaded machine: CI's other jobs, a hog on the other core) the
    card runs out of queued work and idles, as a real one would, through no
    doing of the throttle. So the first figure (busy over wall time) is what
    a limit caps, and the second (busy over the wall time less the probe's
    run-queue waits) what a limit must still give. The second is exact on
    an idle machine and generous on a loaded one (queued work runs through
    a short wait), so the floor never fails for want of a CPU."""
    pid = probe.p.pid
    mockctl(world, "reset-busy")
    t0, w0 = time.monotonic_ns(), runqueue_wait_ns(pid)
    while True:
        time.sleep(0.25)
        out = mockctl(world)
        waited = runqueue_wait_ns(pid) - w0
        now = int(re.search(r"^now_ns=(\d+)", out, re.M).group(1))
        own = now - t0 - waited
        if own >= seconds * 1e9 or now - t0 >= most * 1e9:
            break
    busy = int(re.search(rf"^card {card} .*busy_ns=(\d+)", out, re.M).group(1))
    return 100.0 * busy / (now - t0), 100.0 * busy / max(own, 1), waited / 1e9


def core_conf(core, **more):
    conf = {"EGPU_VCUDA_CORE": str(core)}
    conf.update({f"EGPU_VCUDA_{k.upper()}": str(v) for k, v in more.items()})
    return conf


@pytest.mark.parametrize("lookup,entry", [("direct", "graph"), ("procaddr", "graph_ptsz")],
                         ids=["cuGraphLaunch-direct", "cuGraphLaunch_ptsz-procaddr"])
def test_graph_launches_are_throttled(world, lookup, entry):
    """A process launching a CUDA graph (1 ms of device time each, the
    mock's EGPU_MOCK_CUDA_GRAPH_NS) over and over gets its 30%, not the whole
    card: cuGraphLaunch(_ptsz) goes through the controller like a kernel."""
    probe = Probe(world, lookup=lookup, conf=core_conf(30))
    assert probe.rc("init") == 0 and probe.rc("ctx 0 primary") == 0
    assert probe.rc("instantiate") == 0
    assert probe(f"spin {entry} - 0") == ["spin", "0"]
    time.sleep(0.5)  # past learning the graph's cost
    share, own, waited = held_share(world, probe, 1.5)
    stop = probe("stop")
    assert stop[2] == "0" and int(stop[1]) > 100, stop
    said = (f"{share:.1f}% of the card, {own:.1f}% of the probe's own time ({waited:.2f} s "
            f"waiting for a CPU)")
    assert share <= 40, f"graph launches got {said} at a 30% limit"
    assert own >= 20, f"graph launches got {said} at a 30% limit"
    assert probe.close() == 0
    assert log_lines(probe.stderr()) == []


WAVE_NS = 100000  # device ns per wave of SMs of the mock kernel "wave"


def waves(blocks, sms):
    return -(-blocks // sms)


def sm_conf(core, sms):
    """core percent on a mock card of sms SMs (EGPU_MOCK_CUDA_SMS: a grid runs
    in waves of sms blocks, WAVE_NS each for the kernel "wave")."""
    return dict(core_conf(core), EGPU_MOCK_CUDA_SMS=str(sms),
                EGPU_MOCK_CUDA_KERNEL_NS=f"wave={WAVE_NS}")


@pytest.mark.parametrize("core", [30, 50])
@pytest.mark.parametrize("sms", [132, 188])
def test_share_holds_on_large_gpus(world, sms, core):
    """On cards of 132 and 188 SMs, where a grid of 1000 blocks runs in 8 and
    6 waves (0.8 and 0.6 ms), a saturating process gets its share: the
    controller charges measured device time and never reads the SM count, so
    nothing in it grows with the SMs (the peers' users see caps that barely
    hold on large cards). Bounds as test_graph_launches_are_throttled's, for
    a loaded machine; the virtual card of test_vcuda_throttle holds the same
    cases to 1 point (test_sim_large_gpus)."""
    probe = Probe(world, conf=sm_conf(core, sms))
    assert probe.rc("init") == 0 and probe.rc("ctx 0 primary") == 0
    assert probe("spin kernel wave 1000") == ["spin", "0"]
    time.sleep(0.5)  # past learning the kernel's cost
    share, own, waited = held_share(world, probe, 1.5)
    stop = probe("stop")
    assert stop[2] == "0" and int(stop[1]) > 100, stop
    said = (f"{share:.1f}% of a {sms}-SM card, {own:.1f}% of the probe's own time ({waited:.2f} s "
            f"waiting for a CPU)")
    assert share <= core + 10, f"{said} at a {core}% limit"
    assert own >= core - 10, f"{said} at a {core}% limit"
    assert probe.close() == 0
    assert log_lines(probe.stderr()) == []


@pytest.mark.parametrize("sms", [132, 188])
def test_graph_of_kernels_is_charged(world, sms):
    """A graph of 8 captured kernels (1000 blocks each: 8 x 8 or 8 x 6 waves,
    6.4 or 4.8 ms a launch) launched in a loop at 30%: the card runs the
    graph's kernels (busy time per launch is their sum) and the loop gets
    its 30%, not the card: cuGraphLaunch is charged the graph's measured
    span, its kernels' device time."""
    probe = Probe(world, conf=sm_conf(30, sms))
    assert probe.rc("init") == 0 and probe.rc("ctx 0 primary") == 0
    assert probe("stream") == ["stream", "0", "0"]
    assert probe.rc("capture 0 0") == 0  # CU_STREAM_CAPTURE_MODE_GLOBAL
    assert probe("launchon 0 wave 1000 8")[1] == "0"
    assert probe("endcapture 0") == ["endcapture", "0", "8"]
    assert probe.rc("instantiate") == 0
    assert probe("spin graph - 0") == ["spin", "0"]
    time.sleep(0.5)  # past learning the graph's cost
    share, own, waited = held_share(world, probe, 1.5)
    out = mockctl(world)
    stop = probe("stop")
    assert stop[2] == "0" and int(stop[1]) > 20, stop
    busy = int(re.search(r"^card 0 .*busy_ns=(\d+)", out, re.M).group(1))
    launches = int(re.search(r"^card 0 .*launches=(\d+)", out, re.M).group(1))
    per_launch = 8 * waves(1000, sms) * WAVE_NS
    # a run cut by the window's start or end counts in part
    assert launches > 20 and abs(busy / launches - per_launch) <= per_launch * 3 / launches, out
    said = (f"{share:.1f}% of a {sms}-SM card, {own:.1f}% of the probe's own time ({waited:.2f} s "
            f"waiting for a CPU)")
    assert share <= 40, f"a graph of kernels got {said} at a 30% limit"
    assert own >= 20, f"a graph of kernels got {said} at a 30% limit"
    assert probe.close() == 0
    assert log_lines(probe.stderr()) == []


def test_capture_is_not_charged(world):
    """Kernels launched into a stream capture do not run: they are neither
    timed (no event recorded into the capture) nor charged. 100 captured
    launches of a learned 5 ms kernel at 10% would otherwise wait about 5 s
    for the bucket; the graph comes out whole."""
    env_conf = dict(core_conf(10), EGPU_MOCK_CUDA_KERNEL_NS="cap=5000000")
    probe = Probe(world, conf=env_conf)
    assert probe.rc("init") == 0 and probe.rc("ctx 0 primary") == 0
    assert probe("stream") == ["stream", "0", "0"]
    assert probe("launchon 0 cap 1 6")[1] == "0"  # learned: 5 ms a launch
    assert probe.rc("sync 0") == 0
    time.sleep(0.1)
    assert probe.rc("capture 0 0") == 0  # CU_STREAM_CAPTURE_MODE_GLOBAL
    assert probe("capturing 0") == ["capturing", "0", "1"]
    a = probe("launchon 0 cap 1 100")
    assert a[1] == "0", a
    assert probe("endcapture 0") == ["endcapture", "0", "100"]
    assert int(a[2]) < 2000000, f"100 captured launches took {int(a[2]) / 1e6:.2f} s"
    # the graph runs, and is throttled like any launch
    assert probe.rc("instantiate") == 0
    assert probe.rc("graphlaunch 0 1 plain") == 0
    assert probe.rc("sync 0") == 0
    assert probe.close() == 0
    assert log_lines(probe.stderr()) == []


def test_controller_keeps_a_global_capture_valid(world):
    """While this thread captures in CU_STREAM_CAPTURE_MODE_GLOBAL, the
    controller still collects its timed launches on another stream with
    cuEventQuery, which the driver forbids in that mode; it switches the
    thread to RELAXED for them, so the capture is not invalidated."""
    conf = dict(core_conf(50), EGPU_MOCK_CUDA_KERNEL_NS="eager=20000000,cap=1000000")
    probe = Probe(world, conf=conf)
    assert probe.rc("init") == 0 and probe.rc("ctx 0 primary") == 0
    assert probe("stream") == ["stream", "0", "0"]
    assert probe("stream") == ["stream", "0", "1"]
    assert probe("launchon 0 eager 1 1")[1] == "0"  # timed; its events still pending
    assert probe.rc("capture 1 0") == 0
    assert probe("launchon 1 cap 1 3")[1] == "0"  # new kernel: the controller collects samples
    assert probe("endcapture 1") == ["endcapture", "0", "3"]
    assert probe.rc("sync 0") == 0
    assert probe.close() == 0
    assert log_lines(probe.stderr()) == []


def mock_calls(probe):
    """What the mock driver says the probe's process called: {name: calls}."""
    a = probe("calls")
    assert a[0] == "calls" and a[1:] != ["-"], a
    return {k: int(v) for k, v in (f.split("=") for f in a[1:])}


def calls_between(before, after):
    return {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}


@pytest.mark.parametrize("lookup", ["direct", "procaddr"])
def test_throttled_launches_make_no_driver_call(world, lookup):
    """With tokens available, a throttled launch makes no driver call of its
    own: over 4,000 launches of a learned kernel at 50%, the driver sees the
    4,000 launches and the timed ones' few calls (one launch in 200 here,
    7 calls each), not a call per launch: cuCtxGetCurrent comes from the
    thread's cache. A call added to every launch (or every few) fails it."""
    n = 4000
    conf = dict(core_conf(50), EGPU_MOCK_CUDA_KERNEL_NS="tiny=1")
    probe = Probe(world, lookup=lookup, conf=conf)
    assert probe.rc("init") == 0 and probe.rc("ctx 0 primary") == 0
    assert probe("stream") == ["stream", "0", "0"]
    assert probe("launchon 0 tiny 1 100")[1] == "0"  # learned
    assert probe.rc("sync 0") == 0
    before = mock_calls(probe)
    assert probe(f"launchon 0 tiny 1 {n}")[1] == "0"
    made = calls_between(before, mock_calls(probe))
    assert made.pop("cuLaunchKernel") == n, made
    assert sum(made.values()) <= n // 20, made
    assert made.get("cuCtxGetCurrent", 0) <= n // 100, made
    assert probe.close() == 0
    assert log_lines(probe.stderr()) == []


def buckets(world):
    """Each card's bucket (the wall ns its charges are paid up to) in the
    compute region (throttle.h, struct egpu__vcuda_throttle_region: card i at 64 + 64 i)."""
    data = (world["dir"] / "vcuda-core.shm").read_bytes()
    return [int.from_bytes(data[64 + 64 * i:72 + 64 * i], "little") for i in range(2)]


def test_launches_follow_the_current_context(world):
    """The launch path caches the thread's context and asks the driver again
    only after a call that may change it: cuCtxSetCurrent,
    cuCtxPushCurrent_v2 and cuCtxPopCurrent_v2 (hooked), cuCtxCreate. After
    every switch the launches are charged to the card of the context they
    run in, and the interposer never finds its cached context wrong (it
    would say so at info level, and stop caching). Each launch of the 1 ms
    kernel moves its card's bucket 2 ms at 50%; the other card's moves only
    by the corrections of samples collected meanwhile (microseconds, once
    the kernel is learned in both contexts)."""
    conf = dict(core_conf(50, log_level="info"), EGPU_MOCK_CUDA_KERNEL_NS="big=1000000")
    probe = Probe(world, conf=conf)
    assert probe.rc("init") == 0
    assert probe.rc("ctx 0 primary") == 0 and probe("stream") == ["stream", "0", "0"]
    assert probe("launchon 0 big 1 6")[1] == "0" and probe.rc("sync 0") == 0  # learned
    assert probe.rc("ctx 1 primary") == 0 and probe("stream") == ["stream", "0", "1"]
    assert probe("launchon 1 big 1 6")[1] == "0" and probe.rc("sync 1") == 0
    steps = [  # (switch, stream, card charged)
        (None, "1", 1), ("push 0", "0", 0), ("pop", "1", 1), ("setctx 0", "0", 0),
        ("setctx 1", "1", 1),
    ]
    for switch, stream, card in steps:
        if switch:
            assert probe.rc(switch) == 0, switch
        before = buckets(world)
        assert probe(f"launchon {stream} big 1 2")[1] == "0"
        after = buckets(world)
        assert after[card] - before[card] >= 2000000, (switch, before, after)
        assert abs(after[1 - card] - before[1 - card]) < 200000, (switch, before, after)
        assert probe.rc(f"sync {stream}") == 0
    assert probe.close() == 0
    assert "not hooked" not in probe.stderr(), probe.stderr()


def truncate(path, how):
    """Truncate path in place to 0 bytes or to half its size, as another
    process of the container could."""
    size = path.stat().st_size
    os.truncate(path, 0 if how == "zero" else size // 2)


def test_regions_truncated_under_running_processes(world):
    """Three processes launch kernels and allocate in a loop while the
    compute and the memory regions are truncated to 0 and to half, over and
    over: none crashes (a truncated file mapping would raise SIGBUS), each
    logs at most one line per region, they are still held to their 30%
    afterwards, and the memory limit counts exactly what they hold."""
    conf = dict(core_conf(30), EGPU_VCUDA_MEMORY_MIB="4096", EGPU_MOCK_CUDA_KERNEL_NS="k=1000000")
    probes = [Probe(world, conf=conf) for _ in range(3)]
    for p in probes:
        assert p.rc("init") == 0 and p.rc("ctx 0 primary") == 0
        assert p("spin mixed k 1") == ["spin", "0"]
    core, memory = world["dir"] / "vcuda-core.shm", world["dir"] / "vcuda-memory.shm"
    time.sleep(0.3)
    for i in range(60):
        for region in (core, memory):
            truncate(region, "zero" if i % 2 == 0 else "half")
        time.sleep(0.02)
    time.sleep(0.3)
    share = card_share(world, 1.5)
    for p in probes:
        assert p.p.poll() is None, f"a process died: exit status {p.p.returncode}"
        a = p("stop")
        assert a[0] == "stop" and a[2] == "0" and int(a[1]) > 50, (a, p.stderr())
    assert 15 <= share <= 45, f"three processes at 30% got {share:.1f}% after the truncations"
    # every process counted its context again, and nothing else is held
    for p in probes:
        assert meminfo(p) == (4096 * MIB - 3 * CTX_MIB * MIB, 4096 * MIB)
    for p in probes:
        assert p.close() == 0, p.stderr()
        lines = log_lines(p.stderr())
        assert len(lines) <= 2, lines
        for line in lines:
            assert str(core) in line or str(memory) in line, line


# ---- egpu-vcuda-inspect -------------------------------------------------

def inspect(world, *args, check=None):
    """egpu-vcuda-inspect ARGS on the allocation directory; (rc, stdout, stderr)."""
    r = subprocess.run([str(world["paths"]["inspect"]), *args, str(world["dir"])],
                       capture_output=True, text=True, timeout=LINE_TIMEOUT)
    if check is not None:
        assert r.returncode == check, (r.returncode, r.stdout, r.stderr)
    return r.returncode, r.stdout, r.stderr


def inspect_json(world):
    import json
    _, out, _ = inspect(world, "-o", "json", check=0)
    return json.loads(out)


def snapshot(paths):
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in paths}


@pytest.fixture
def held(world):
    """The agent's layout (vcuda.conf, regions in shared/), two processes
    holding memory and one launching kernels at 30% (limit 60%)."""
    shared = world["dir"] / "shared"
    shared.mkdir()
    (world["dir"] / "vcuda.conf").write_text(
        agent_conf(2048, core=30).replace("EGPU_VCUDA_CORE_LIMIT=30", "EGPU_VCUDA_CORE_LIMIT=60")
        + "EGPU_VCUDA_CONTEXT_MIB=100\n")
    a, b = Probe(world), Probe(world)
    for p in (a, b):
        assert p.rc("init") == 0 and p.rc("ctx 0 primary") == 0
    assert a.rc("alloc mem %d" % (512 * MIB)) == 0
    assert b.rc("alloc mem %d" % (256 * MIB)) == 0
    assert a.rc("launch") == 0
    yield {"a": a, "b": b, "memory": shared / "vcuda-memory.shm", "core": shared / "vcuda-core.shm"}
    for p in (a, b):
        if p.p.poll() is None:
            assert p.close() == 0, p.stderr()


def test_inspect_reports_what_processes_hold(world, held):
    a, b = held["a"], held["b"]
    before = snapshot([held["memory"], held["core"]])
    rc, text, err = inspect(world)
    assert rc == 0 and err == "", (rc, err)
    assert f"regions   {world['dir'] / 'shared'}" in text
    assert "memory 2048 MiB per card, core 30%, core limit 60%" in text
    assert re.search(rf"card {UUID0}  limit 2048 MiB  used 968 MiB", text), text
    assert re.search(rf"pid {a.p.pid} +612 MiB\n", text), text
    assert re.search(rf"pid {b.p.pid} +356 MiB\n", text), text
    assert "2 process slots: 2 live, 0 dead" in text
    assert re.search(rf"card 0 {UUID0}  bucket ", text), text
    assert "dead slot" not in text and "MiB  dead" not in text

    doc = inspect_json(world)
    assert doc["apiVersion"] == "egpu.vcuda-inspect/v1" and doc["kind"] == "VcudaInspect"
    assert doc["regionDir"] == str(world["dir"] / "shared")
    assert doc["config"] == {"file": str(world["dir"] / "vcuda.conf"), "gpus": [UUID0],
                             "memory": 2048, "core": 30, "coreLimit": 60, "contextMib": 100,
                             "contextExtraMib": 0}
    mem = doc["memoryRegion"]
    assert mem["present"] and mem["file"] == str(held["memory"]) and mem["lockHolder"] is None
    assert [c["uuid"] for c in mem["cards"]] == [UUID0]
    card = mem["cards"][0]
    assert card["limit"] == 2048 and card["used"] == 968 and card["recordedTotal"] == 968
    assert sorted((p["pid"], p["memory"], p["bytes"], p["alive"]) for p in card["processes"]) == \
        sorted([(a.p.pid, 612, 612 * MIB, True), (b.p.pid, 356, 356 * MIB, True)])
    assert sorted(p["pid"] for p in mem["processes"]) == sorted([a.p.pid, b.p.pid])
    for p in mem["processes"]:
        assert set(p) == {"slot", "pid", "hostPid", "startTicks", "alive", "confirmed"}
        assert p["alive"] and p["hostPid"] == p["pid"] and p["startTicks"] > 0
    core = doc["computeRegion"]
    assert core["present"] and core["file"] == str(held["core"])
    assert core["regionCore"] == 30 and core["regionCoreLimit"] == 60 and core["burstMs"] == 25
    assert len(core["cards"]) == 1
    c0 = core["cards"][0]
    assert set(c0) == {"index", "uuid", "state", "bucketAheadMs", "queueEndMs"}
    assert c0["index"] == 0 and c0["uuid"] == UUID0
    assert c0["state"] in ("busy", "idle", "throttled") and c0["bucketAheadMs"] is not None
    # read-only: neither file changed, byte for byte, nor its mtime
    assert snapshot([held["memory"], held["core"]]) == before


def test_inspect_shows_a_dead_process(world, held):
    a, b = held["a"], held["b"]
    b.kill()
    assert b.p.wait(timeout=LINE_TIMEOUT) == -signal.SIGKILL
    b.err.close()
    rc, text, _ = inspect(world, check=0)
    assert re.search(rf"pid {b.p.pid} +356 MiB  dead", text), text
    assert re.search(rf"card {UUID0}  limit 2048 MiB  used 612 MiB", text), text
    assert "2 process slots: 1 live, 1 dead" in text
    assert re.search(rf"dead slot \d+: pid {b.p.pid}\n", text), text
    doc = inspect_json(world)
    alive = {p["pid"]: p["alive"] for p in doc["memoryRegion"]["processes"]}
    assert alive == {a.p.pid: True, b.p.pid: False}
    assert doc["memoryRegion"]["cards"][0]["used"] == 612
    assert doc["memoryRegion"]["cards"][0]["recordedTotal"] == 968


@pytest.mark.parametrize("region", ["memory", "core"])
@pytest.mark.parametrize("how", ["truncated", "garbage", "symlink"])
def test_inspect_refuses_bad_regions(world, held, region, how, tmp_path):
    for p in (held["a"], held["b"]):
        assert p.close() == 0
    path = held[region]
    if how == "truncated":
        os.truncate(path, path.stat().st_size // 2)
        word = "truncated"
    elif how == "garbage":
        path.write_bytes(os.urandom(path.stat().st_size))
        word = "bad magic"
    else:
        target = tmp_path / "elsewhere"
        target.write_bytes(path.read_bytes())
        path.unlink()
        path.symlink_to(target)
        word = "symbolic link"
    other = held["core" if region == "memory" else "memory"]
    before = snapshot([other] + ([path] if how != "symlink" else [tmp_path / "elsewhere"]))
    for fmt in ("text", "json"):
        rc, out, err = inspect(world, "-o", fmt)
        assert rc == 1 and out == "", (rc, out, err)
        assert str(path) in err and word in err, err
    assert snapshot(list(before)) == before
    if how == "symlink":
        assert path.is_symlink()


def test_inspect_usage_and_missing(world, tmp_path):
    exe = str(world["paths"]["inspect"])
    r = subprocess.run([exe, "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("Usage: egpu-vcuda-inspect")
    for args in ([], ["-o", "yaml", str(world["dir"])], [str(world["dir"]), "x"], ["--bogus", "d"]):
        r = subprocess.run([exe, *args], capture_output=True, text=True)
        assert r.returncode == 2 and "Usage:" in r.stderr, (args, r.stderr)
    r = subprocess.run([exe, str(tmp_path / "nowhere")], capture_output=True, text=True)
    assert r.returncode == 1 and "nowhere" in r.stderr
    # limits that call for a memory region, and none made yet: exit 1 naming it
    (world["dir"] / "vcuda.conf").write_text(agent_conf(1024))
    rc, out, err = inspect(world)
    assert rc == 1 and str(world["dir"] / "vcuda-memory.shm") in err and "no such file" in err
    # a broken vcuda.conf: exit 1 naming it
    (world["dir"] / "vcuda.conf").write_text("EGPU_VCUDA_MEMORY_MIB=4GiB\n")
    rc, out, err = inspect(world)
    assert rc == 1 and "vcuda.conf" in err and "EGPU_VCUDA_MEMORY_MIB" in err, err
    # no vcuda.conf and no region: nothing limited, nothing to show
    (world["dir"] / "vcuda.conf").unlink()
    doc = inspect_json(world)
    assert doc["config"] == {"file": None, "gpus": None, "memory": None, "core": None,
                             "coreLimit": None, "contextMib": None, "contextExtraMib": None}
    assert doc["memoryRegion"]["present"] is False and doc["memoryRegion"]["cards"] == []
    assert doc["computeRegion"]["present"] is False and doc["computeRegion"]["cards"] == []
