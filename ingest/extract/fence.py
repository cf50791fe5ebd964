"""A Landlock fence around each extraction worker: what a hostile document's parser may
read, write and reach.

A parser runs as the worker's user, so without a fence it could read every file that
user can: ``~/.aws/credentials``, the Prefect profile, a database-URL file, the lake.
Landlock (Linux 5.13+) lets a process restrict itself, and every process it starts,
for good: each worker does so after its imports and before its first job
(``ingest.extract.worker.serve``), with ``no_new_privs`` set first. Within the fence a
worker may

* read and execute the Python installation it runs (``sys.prefix``, ``base_prefix``,
  site-packages, the standard library) and the system's programs and libraries
  (``/usr``, ``/lib*``, ``/bin``, ``/sbin``): a parser imports ezdxf, python-docx or
  pdfminer on its first file of their kind, and native libraries load lazily;
* read the Python packages and modules of its other import paths (a checkout: its
  ``ingest/``, ``tests/`` ..., and the names in it, never its ``.env`` or ``.git``);
* read the folders it is handed (``roots``: the run's download folders);
* write in its own scratch folder only (``scratch``, its ``TMPDIR``), and ``/dev/null``;
* read a few files that libraries read of the system: ``/etc/ld.so.cache``, the time
  zone, ``/etc/mime.types``, ``/etc/passwd``..., ``/proc/self``, ``/proc/cpuinfo``, the
  CPU list in ``/sys``, ``/dev/urandom``.

Nothing else: no other file of its user's home, ``/etc``, ``/run``, ``/var``, the data
folder. From Landlock ABI 4 it may neither connect nor bind a TCP socket (parsers need
no network); from ABI 6 it may not signal, nor reach the abstract Unix sockets of,
processes outside its fence. UDP and named Unix sockets are not Landlock's to fence.

The binding is the three system calls (``landlock_create_ruleset``, ``_add_rule``,
``_restrict_self``; numbers 444-446 on every architecture) and ``prctl`` through
``ctypes``, with the kernel's structures (``include/uapi/linux/landlock.h``). The
Python packages for Landlock were weighed: ``landlock`` is an alpha pre-release without
network rights, ``landlockpy`` a months-old beta; for sixty lines, the project keeps
its own.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import site
import stat
import sys
import sysconfig
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ingest.errors import IngestError

SYS_CREATE_RULESET = 444
SYS_ADD_RULE = 445
SYS_RESTRICT_SELF = 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38

# LANDLOCK_ACCESS_FS_*
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
# LANDLOCK_ACCESS_NET_* (ABI 4) and LANDLOCK_SCOPE_* (ABI 6)
BIND_TCP = 1 << 0
CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1

# The rights that may be granted on a file (the others concern folders).
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE
READ = READ_FILE | READ_DIR
READ_EXEC = READ | EXECUTE
SCRATCH = (
    READ
    | WRITE_FILE
    | REMOVE_DIR
    | REMOVE_FILE
    | MAKE_DIR
    | MAKE_REG
    | MAKE_SYM
    | MAKE_FIFO
    | MAKE_SOCK
    | REFER
    | TRUNCATE
)

SYSTEM = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin")
SYSTEM_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/mime.types",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/group",
    "/etc/os-release",
    "/etc/fonts",
    "/proc/self",
    "/proc/cpuinfo",
    "/proc/meminfo",
    "/sys/devices/system/cpu",
    "/dev/urandom",
    "/dev/random",
    "/dev/zero",
)


class FenceError(IngestError, OSError):
    """The fence could not be set (the worker must not run without the fence it was given)."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # packed in the kernel's header: 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _syscall(number: int, *args: object) -> int:
    result = int(_libc().syscall(ctypes.c_long(number), *args))
    if result < 0:
        code = ctypes.get_errno()
        raise FenceError(code, os.strerror(code))
    return result


@functools.cache
def landlock_abi() -> int:
    """The Landlock ABI this kernel offers; 0 where there is none (not Linux, a kernel
    before 5.13 or built without it, Landlock left out of the boot's LSM list, a
    container's seccomp filter that refuses the call)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        return _syscall(
            SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION)
        )
    except (OSError, AttributeError):
        return 0


def handled(abi: int) -> tuple[int, int, int]:
    """The filesystem rights, network rights and scopes that ``abi`` knows: all of them are
    denied inside the fence but where a rule grants them."""
    fs = (1 << 13) - 1  # ABI 1: EXECUTE .. MAKE_SYM
    if abi >= 2:
        fs |= REFER
    if abi >= 3:
        fs |= TRUNCATE
    net = BIND_TCP | CONNECT_TCP if abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    return fs, net, scoped


@dataclass(frozen=True, slots=True)
class Rule:
    """``rights`` on ``path`` and all beneath it (a file: that file)."""

    path: str
    rights: int


def python_rules() -> list[Rule]:
    """What the Python installation of this process needs, read and executed: its
    prefixes, standard library and site-packages, and, for an import path outside them
    (a checkout), its packages and modules only, with the names in it."""
    installed = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        *sysconfig.get_paths().values(),
        *site.getsitepackages(),
        os.path.dirname(os.path.realpath(sys.executable)),
    }
    user_site = site.getusersitepackages()
    if site.ENABLE_USER_SITE and user_site in sys.path:
        installed.add(user_site)
    roots = sorted({os.path.realpath(p) for p in installed if p})
    rules = [Rule(p, READ_EXEC) for p in roots]
    for entry in sys.path:
        if not isinstance(entry, str) or not entry:
            continue
        real = os.path.realpath(entry)
        if any(_beneath(real, r) for r in roots) or not os.path.isdir(real):
            continue
        rules.append(Rule(real, READ_DIR))  # names, so that an import can look for them
        rules.extend(Rule(p, READ) for p in _python_files(real))
    return rules


def _python_files(folder: str) -> Iterator[str]:
    """The packages and modules directly in ``folder``: folders with an ``__init__.py`` or
    imported as a namespace package, and ``.py`` or extension files."""
    imported = {
        os.path.realpath(p)
        for module in list(sys.modules.values())
        for p in getattr(getattr(module, "__spec__", None), "submodule_search_locations", None)
        or ()
    }
    with os.scandir(folder) as entries:
        for entry in entries:
            path = os.path.join(folder, entry.name)
            if entry.name.startswith("."):
                continue
            if entry.is_dir():
                if os.path.isfile(os.path.join(path, "__init__.py")) or (
                    os.path.realpath(path) in imported
                ):
                    yield path
            elif entry.name.endswith((".py", ".so", ".pyd", ".pth")):
                yield path


def _beneath(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


@functools.cache
def rules_for(roots: tuple[str, ...], scratch: str | None) -> tuple[Rule, ...]:
    """Every rule of a worker's fence: the Python installation, the system's programs and
    libraries, the few system files libraries read, ``roots`` to read, ``scratch`` (and
    ``/dev/null``) to write. Kept: the fork server works them out once, after its imports,
    and every worker it forks has them (each opens the paths itself: ``/proc/self`` is
    its own)."""
    rules = python_rules()
    rules += [Rule(p, READ_EXEC) for p in SYSTEM]
    rules += [Rule(p, READ) for p in SYSTEM_FILES]
    rules += [Rule(os.path.realpath(p), READ) for p in roots]
    rules.append(Rule(os.devnull, READ_FILE | WRITE_FILE | TRUNCATE))
    if scratch:
        rules.append(Rule(os.path.realpath(scratch), SCRATCH))
    return tuple(rules)


def restrict(roots: Iterable[str], scratch: str | None) -> int:
    """Fence this process (and every process it starts) for good: see the module. Returns
    the ABI used; raises ``FenceError`` when Landlock is missing or a call fails, so that
    a worker never runs as fenced without the fence."""
    abi = landlock_abi()
    if abi < 1:
        raise FenceError(errno.EOPNOTSUPP, "this kernel has no Landlock")
    fs, net, scoped = handled(abi)
    attr = _RulesetAttr(fs, net, scoped)
    size = ctypes.sizeof(attr) if abi >= 6 else (16 if abi >= 4 else 8)
    ruleset = _syscall(
        SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)
    )
    try:
        for rule in rules_for(tuple(roots), scratch):
            _add(ruleset, rule, fs)
        if _libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            code = ctypes.get_errno()
            raise FenceError(code, f"no_new_privs: {os.strerror(code)}")
        _syscall(SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)
    return abi


def _add(ruleset: int, rule: Rule, handled_fs: int) -> None:
    """Grant ``rule`` (a path that is missing, or that this user cannot open, is left out:
    nothing beneath it is granted)."""
    try:
        fd = os.open(rule.path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        rights = rule.rights & handled_fs
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= FILE_RIGHTS
        attr = _PathBeneathAttr(rights, fd)
        _syscall(
            SYS_ADD_RULE,
            ctypes.c_int(ruleset),
            ctypes.c_int(RULE_PATH_BENEATH),
            ctypes.byref(attr),
            ctypes.c_uint32(0),
        )
    finally:
        os.close(fd)
