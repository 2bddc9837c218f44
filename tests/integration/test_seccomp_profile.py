"""The seccomp profile of shared-GPU containers (deploy/agent/seccomp/
shared-gpu.json, which egpu-webhook gives every container asking a gpu-core
share 1..99 and the agent's init container installs under the kubelet's
seccomp directory): loaded into a real filter here, with libseccomp as
runc and crun load it (SCMP_CMP_MASKED_EQ: "value" is the mask, "valueTwo"
the datum), it refuses what the reviewer did, `unshare -Urm` (a new user and
mount namespace, in which /etc/elastic-gpu or /etc/ld.so.preload could be
mounted over), and every other way to a new namespace or a mount, while a
shell, fork and exec still work.
"""
import ctypes
import ctypes.util
import errno
import json
import os
import shutil
import subprocess

import pytest

from conftest import ROOT

PROFILE = ROOT / "deploy" / "agent" / "seccomp" / "shared-gpu.json"
SCMP_ACT_ALLOW = 0x7FFF0000
OPS = {"SCMP_CMP_NE": 1, "SCMP_CMP_LT": 2, "SCMP_CMP_LE": 3, "SCMP_CMP_EQ": 4,
       "SCMP_CMP_GE": 5, "SCMP_CMP_GT": 6, "SCMP_CMP_MASKED_EQ": 7}
ARCH = {"SCMP_ARCH_X86_64": 0xC000003E, "SCMP_ARCH_X86": 0x40000003,
        "SCMP_ARCH_X32": 0x4000003E, "SCMP_ARCH_AARCH64": 0xC00000B7,
        "SCMP_ARCH_ARM": 0x40000028}


class ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


def libseccomp():
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError:
        pytest.skip("libseccomp is not installed")
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                           ctypes.c_uint, ctypes.POINTER(ArgCmp)]
    lib.seccomp_arch_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    return lib


def build_filter(lib, profile):
    """The profile as a loaded-ready libseccomp context (what runc does)."""
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    assert ctx
    for arch in profile["architectures"]:
        rc = lib.seccomp_arch_add(ctx, ARCH[arch])
        assert rc in (0, -errno.EEXIST), (arch, rc)
    for rule in profile["syscalls"]:
        assert rule["action"] == "SCMP_ACT_ERRNO", rule
        action = 0x00050000 | rule["errnoRet"]  # SCMP_ACT_ERRNO(n)
        args = rule.get("args", [])
        cmps = (ArgCmp * max(len(args), 1))(*[
            ArgCmp(a["index"], OPS[a["op"]], a["value"], a.get("valueTwo", 0)) for a in args])
        for name in rule["names"]:
            nr = lib.seccomp_syscall_resolve_name(name.encode())
            if nr < 0:
                continue  # not a syscall of this architecture (runc skips it too)
            rc = lib.seccomp_rule_add_array(ctx, action, nr, len(args), cmps)
            assert rc == 0, (name, rc)
    return ctx


def run_confined(argv):
    lib = libseccomp()
    ctx = build_filter(lib, json.loads(PROFILE.read_text()))

    def confine():
        if lib.seccomp_load(ctx) != 0:
            os._exit(121)

    return subprocess.run(argv, preexec_fn=confine, capture_output=True, text=True, timeout=30)


def unconfined_unshare_works():
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-Urm", "true"], capture_output=True).returncode == 0


def test_profile_refuses_unshare_urm():
    if not unconfined_unshare_works():
        pytest.skip("this machine refuses user namespaces already: nothing to show")
    out = run_confined(["unshare", "-Urm", "sh", "-c",
                        "mount -t tmpfs none /etc && echo mounted"])
    assert out.returncode != 0 and "mounted" not in out.stdout, out
    assert "Operation not permitted" in out.stderr, out.stderr
    for flags in (["-U"], ["-m"], ["-n"], ["-p", "-f"], ["-i"], ["-u"], ["-C"]):
        out = run_confined(["unshare", *flags, "true"])
        assert out.returncode != 0, (flags, out)


def test_profile_refuses_clone_with_namespaces():
    # clone(2) with a namespace flag, as a program would make one without
    # unshare(2): python's os.fork uses plain clone, so ask libc's syscall().
    code = (
        "import ctypes, os, sys\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "SIGCHLD = 17\n"
        "for flag in (0x10000000, 0x00020000, 0x40000000):\n"
        "    pid = libc.syscall(56, flag | SIGCHLD, 0, 0, 0, 0)\n"
        "    if pid == 0:\n"
        "        os._exit(0)\n"
        "    if pid > 0:\n"
        "        os.waitpid(pid, 0)\n"
        "        print('cloned', hex(flag))\n"
        "        sys.exit(1)\n"
        "    assert ctypes.get_errno() == 1, ctypes.get_errno()\n"
        "print('refused')\n")
    if os.uname().machine != "x86_64":
        pytest.skip("the clone syscall number used is x86-64's")
    out = run_confined(["/usr/bin/python3", "-c", code])
    assert (out.returncode, out.stdout) == (0, "refused\n"), out


def test_profile_keeps_ordinary_work():
    out = run_confined(["/bin/sh", "-c", "echo $(echo nested) && ls / >/dev/null && echo done"])
    assert (out.returncode, out.stdout) == (0, "nested\ndone\n"), out


def test_webhook_names_the_shipped_profile():
    """The default --seccomp-profile is this file's path under the kubelet's
    seccomp directory, where the agent's init container puts it."""
    header = (ROOT / "include" / "egpu" / "webhook.h").read_text()
    assert '#define EGPU_WEBHOOK_SECCOMP_PROFILE "elastic-gpu/shared-gpu.json"' in header
    for ds in (ROOT / "deploy" / "agent" / "daemonset.yaml",
               ROOT / "deploy" / "helm" / "elastic-gpu" / "templates" / "agent" / "daemonset.yaml"):
        text = ds.read_text()
        assert "/var/lib/kubelet/seccomp/elastic-gpu" in text, ds
        assert "shared-gpu.json" in text, ds
