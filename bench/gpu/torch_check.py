#!/usr/bin/env python3
"""bench/gpu/torch_check.py - PyTorch under libegpu-vcuda.so on a real NVIDIA GPU.

What PyTorch users meet, measured from outside the process with NVML (the card's used memory
before and while the process holds its most), so nothing the interposer reports is believed:

  context   a process that made its CUDA context and one small tensor: the device memory it
            really takes, and what the interposer charges for it (the card's total less
            torch.cuda.mem_get_info()'s free, as the process sees them)          (point 1)
  mem       default caching allocator, EGPU_VCUDA_MEMORY_MIB=4096: 64 MiB tensors until
            torch.OutOfMemoryError, half of them freed, 96 MiB tensors until it again; the
            most real memory the process held must not pass the limit             (points 1, 2)
  async     the same with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync, whose pool keeps
            freed memory reserved (release threshold UINT64_MAX)                 (point 2)
  tiny      200,000 x.add_(1) on 1,000 elements, without the interposer and at core 30%:
            the time of the loop and the speed against the driver's              (point 3)

  --context-extra-mib N sets EGPU_VCUDA_CONTEXT_EXTRA_MIB=N in the mem and async runs (what
  egpu-agent --context-extra-mib writes): the driver's memory beyond each process's context.

Usage: bench/gpu/torch_check.py [--vcuda PATH] [--limit-mib N] [--context-extra-mib N] [--tiny N]
Needs PyTorch with CUDA and nvidia-ml-py (pynvml); without them it says so and exits 0.
Exit status: 0 when every check held (or nothing to run), 1 when one did not.
"""
import argparse
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import sys, time, torch
mode = sys.argv[1]
def hold(tag, n):
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    print(f"holding {tag} mib={n} seen_free={free >> 20} seen_total={total >> 20}", flush=True)
    sys.stdin.readline()
if mode == "context":
    x = torch.ones(1, device="cuda")
    hold("context", 0)
elif mode in ("mem", "async"):
    x = torch.ones(1, device="cuda")
    blocks, n = [], 0
    try:
        while True:
            blocks.append(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"))
            n += 64
    except torch.OutOfMemoryError:
        pass
    hold("first", n)
    del blocks[::2]
    n = len(blocks) * 64
    try:
        while True:
            blocks.append(torch.empty(96 << 20, dtype=torch.uint8, device="cuda"))
            n += 96
    except torch.OutOfMemoryError:
        pass
    hold("second", n)
elif mode == "tiny":
    x = torch.zeros(1000, device="cuda")
    for _ in range(2000):
        x.add_(1)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(int(sys.argv[2])):
        x.add_(1)
    torch.cuda.synchronize()
    print(f"secs {time.perf_counter() - t:.4f}", flush=True)
"""


def used_mib(nvml, handle):
    return nvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20


def run_child(args, env, nvml, handle):
    """Runs CHILD with args; at each 'holding' line reads the card's used memory. Returns
    (lines, [(tag, real_mib_above_baseline, line)])."""
    base = used_mib(nvml, handle)
    p = subprocess.Popen([sys.executable, "-c", CHILD] + args, env=env, text=True,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    holds, lines = [], []
    for line in p.stdout:
        lines.append(line.strip())
        if line.startswith("holding"):
            holds.append((line.split()[1], used_mib(nvml, handle) - base, line.strip()))
            p.stdin.write("\n")
            p.stdin.flush()
    err = p.stderr.read()
    p.wait()
    if p.returncode != 0:
        lines.append(f"exit {p.returncode}: {err.strip()[-400:]}")
    return lines, holds


def kv(line, key):
    for word in line.split():
        if word.startswith(key + "="):
            return int(word.split("=", 1)[1])
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vcuda", default=os.environ.get("EGPU_GPUBENCH_VCUDA",
                                                      "build/src/vcuda/libegpu-vcuda.so"))
    ap.add_argument("--limit-mib", type=int, default=4096)
    ap.add_argument("--context-extra-mib", type=int, default=0)
    ap.add_argument("--tiny", type=int, default=200000)
    ap.add_argument("--core", type=int, default=30)
    a = ap.parse_args()
    try:
        import pynvml as nvml  # noqa: PLC0415 (optional: only on a GPU machine)
        import torch  # noqa: F401,PLC0415
    except ImportError as e:
        print(f"torch_check: {e}; skipping")
        return 0
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    vcuda = os.path.abspath(a.vcuda)
    if not os.path.exists(vcuda):
        print(f"torch_check: no interposer at {vcuda}", file=sys.stderr)
        return 2
    bad = 0
    base_env = {k: v for k, v in os.environ.items()
                if not k.startswith("EGPU_VCUDA_") and k not in ("LD_PRELOAD",
                                                                 "PYTORCH_CUDA_ALLOC_CONF")}

    def interposed(extra):
        d = tempfile.mkdtemp(prefix="egpu-torch-")
        env = dict(base_env, LD_PRELOAD=vcuda, EGPU_VCUDA_DIR=d)
        env.update(extra)
        return env

    print(f"torch_check: {nvml.nvmlDeviceGetName(handle)}, torch {torch.__version__}, "
          f"interposer {vcuda}")
    lines, holds = run_child(["context"], dict(base_env), nvml, handle)
    bare = holds[0][1] if holds else None
    lines_i, holds_i = run_child(["context"], interposed({"EGPU_VCUDA_MEMORY_MIB": "65536"}),
                                 nvml, handle)
    if bare is None or not holds_i:
        print("context: FAIL", lines + lines_i)
        bad += 1
    else:
        seen = holds_i[0][2]
        charged = kv(seen, "seen_total") - kv(seen, "seen_free")
        print(f"context: real {bare:.0f} MiB without the interposer, {holds_i[0][1]:.0f} MiB "
              f"with it; charged {charged} MiB (error {charged - holds_i[0][1]:+.0f} MiB)")
    for mode, extra in (("mem", {}), ("async",
                                      {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"})):
        env = interposed(dict(extra, EGPU_VCUDA_MEMORY_MIB=str(a.limit_mib)))
        if a.context_extra_mib:
            env["EGPU_VCUDA_CONTEXT_EXTRA_MIB"] = str(a.context_extra_mib)
        lines, holds = run_child([mode], env, nvml, handle)
        if len(holds) != 2:
            print(f"{mode}: FAIL {lines[-3:]}")
            bad += 1
            continue
        top = max(h[1] for h in holds)
        verdict = "PASS" if top <= a.limit_mib else "FAIL"
        bad += verdict == "FAIL"
        print(f"{mode}: limit {a.limit_mib} MiB, extra {a.context_extra_mib}; "
              f"tensors {kv(holds[0][2], 'mib')} then "
              f"{kv(holds[1][2], 'mib')} MiB; real use at most {top:.0f} MiB "
              f"({top - a.limit_mib:+.0f}); {verdict}")
    secs = {}
    for name, env in (("driver", dict(base_env)),
                      (f"core {a.core}%", interposed({"EGPU_VCUDA_CORE": str(a.core)}))):
        lines, _ = run_child(["tiny", str(a.tiny)], env, nvml, handle)
        got = [ln for ln in lines if ln.startswith("secs ")]
        secs[name] = float(got[0].split()[1]) if got else None
    if None in secs.values():
        print("tiny: FAIL", secs)
        bad += 1
    else:
        speed = secs["driver"] / secs[f"core {a.core}%"]
        verdict = "PASS" if speed >= 0.95 else "MISSED"
        bad += verdict != "PASS"
        print(f"tiny: {a.tiny} x.add_(1): driver {secs['driver']:.2f} s, core {a.core}% "
              f"{secs[f'core {a.core}%']:.2f} s, speed {100 * speed:.1f}% (target >= 95%); "
              f"{verdict}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
