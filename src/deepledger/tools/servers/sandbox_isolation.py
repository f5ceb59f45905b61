"""How the code a model writes is kept away from the machine: probing, and the worker's argv.

Shared by the ``python`` server (``python_sandbox``) and ``tool-python`` (``tool_python``).
Three modes, strongest first; ``auto`` takes the strongest that works here, probed at startup
by really starting an interpreter the way a worker will be started:

``bwrap`` (bubblewrap)
    The worker runs in its own PID, network, IPC, UTS and (where possible) cgroup namespaces,
    with its own ``/proc`` (it sees only its own processes), an empty loopback network,
    ``--die-with-parent`` and ``--new-session``. Its filesystem is a fresh tmpfs root holding
    only read-only binds of ``/usr`` (and ``/bin``, ``/lib*`` as the host has them), a short
    list of ``/etc`` files (loader cache, certificates, time zone, alternatives), a generated
    ``/etc/passwd``/``/etc/group``, the interpreter's folders (``sys.prefix``, the venv, and
    ``sys.base_prefix``, its base install), the worker script, new ``/dev``, and its writable
    places: its work folder (cwd, ``HOME``, ``TMPDIR``), ``/tmp`` and ``/dev/shm``, all three
    on one quota disk (``sandbox_disk``) where the server can make one, else the work folder
    bound and the other two tmpfs sharing the disk budget (half each: RAM-backed, so
    they must not take it twice). Not the project folder, not ``$HOME``, not the server's
    working directory. Its folders in the host's temp dir (``/etc`` support files, an own
    work folder, the probe's) carry the server's pid; each server deletes, at start, those
    of servers no longer alive.
    bwrap is started with an empty environment and ``--clearenv``, so nothing of the server's
    environment reaches the sandbox, not even through bwrap's own ``/proc/1/environ``.

    Who the code runs as: started by root, bwrap runs *without* a user namespace and the worker
    drops, before it reads any request, to a uid/gid of its own (one per sandbox, from
    ``_SANDBOX_IDS``; no capabilities, no supplementary groups, ``no_new_privs``). This matters:
    bwrap's ``--unshare-user --uid 65534`` run as root maps uid 65534 back to host uid 0, which
    still owns root's files (``/etc/shadow`` reads fine) and is exempt from RLIMIT_NPROC.
    A uid of its own also makes RLIMIT_NPROC a per-sandbox process limit. Started by another
    user, bwrap uses an unprivileged user namespace (``--uid 65534``, mapped to that user,
    ``--disable-userns``), and the process limit counts on top of the user's current tasks.
    In both, on x86_64 the worker installs a seccomp filter before it reads any request that
    refuses ``unshare``/``clone`` with ``CLONE_NEWUSER`` (and ``clone3``, which glibc then
    replaces with ``clone``): the code cannot make itself root of a user namespace of its
    own, the usual way into the kernel's less-guarded paths. Elsewhere no filter is set
    (the tool description then does not claim it).

``unshare`` (fallback)
    util-linux ``unshare --net`` (as root) or ``unshare --user --map-root-user --net``: no
    network, but the code runs as the same user on the same filesystem and PID namespace,
    so it can read the user's files and other processes' ``/proc/<pid>/environ``.

``none``
    Nothing beyond the worker's own limits (time, memory, private cwd, minimal environment).

In every mode, a sandbox's processes share one cgroup (``sandbox_cgroups``: memory and
process count of all of them together) where the server can make one, else each has
per-process limits only.

Every tool description and the server instructions carry ``Isolation.summary``, which says
exactly which of these is in force, limits included; in the weaker modes the first result
repeats it.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from deepledger.tools.servers.sandbox_cgroups import (
    CgroupLimits,
    Cgroups,
    CgroupsUnavailableError,
    SandboxCgroup,
    owner_alive,
    probe_cgroups,
)
from deepledger.tools.servers.sandbox_disk import (
    DiskQuotaUnavailableError,
    QuotaDisk,
    probe_quota_disk,
)

ISOLATION_CHOICES = ("auto", "bwrap", "unshare", "none")

# Per-sandbox uids/gids when bwrap runs as root: far above login users (1000+) and the usual
# subordinate-id ranges (100000-165535 for the first user), so no host account owns them.
_SANDBOX_IDS = (1_500_000_000, 1_600_000_000)
_USERNS_ID = 65534  # the uid/gid the code sees in the unprivileged (user namespace) mode
_WORKER_SCRIPT = Path(__file__).with_name("_sandbox_worker.py")
_WORKER_INSIDE = "/run/sandbox/_sandbox_worker.py"
_TOP_LEVEL = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# What programs in the sandbox need from /etc; everything else there stays out.
_ETC_ENTRIES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "localtime",
    "timezone",
    "nsswitch.conf",
    "host.conf",
    "gai.conf",
    "protocols",
    "services",
    "mime.types",
    "locale.alias",
    "fonts",
    "os-release",
    "debian_version",
)
_PROBE_TIMEOUT_SECONDS = 15
# Folders in the temp dir, named "<prefix><server pid>-": a killed server cannot delete them,
# so the next server deletes those of servers no longer alive.
_SUPPORT_PREFIX = "deepledger-sandbox-etc-"
_WORK_PREFIX = "deepledger-work-"
_PROBE_PREFIX = "deepledger-probe-"

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
_NO_SPACE = os.strerror(28)  # ENOSPC: "No space left on device"


class IsolationUnavailableError(RuntimeError):
    """The isolation asked for (``--isolation bwrap|unshare``) does not work here."""


class SandboxResourcesError(RuntimeError):
    """One sandbox's cgroup or disk could not be made (though the probe could); says why."""


@dataclass(frozen=True)
class Budget:
    """What one sandbox may take of the host, all its processes together where enforceable."""

    memory_mb: int = 2048
    max_processes: int = 256  # processes and threads
    disk_mb: int = 1024  # the work folder, /tmp and /dev/shm together
    max_file_mb: int = 1024  # RLIMIT_FSIZE: the largest one file

    @property
    def cgroup_limits(self) -> CgroupLimits:
        return CgroupLimits(self.memory_mb * 1024 * 1024, self.max_processes)

    @property
    def tmpfs_split_mb(self) -> tuple[int, int]:
        """(/tmp, /dev/shm) sizes without a quota disk: RAM-backed, so they share disk_mb
        rather than each taking all of it."""
        tmp_mb = max(self.disk_mb - self.disk_mb // 2, 1)
        return tmp_mb, max(self.disk_mb // 2, 1)


@dataclass(frozen=True)
class Isolation:
    """The isolation in force on this machine, and the sentence that tells the model so."""

    mode: str  # "bwrap", "unshare" or "none"
    summary: str
    bwrap: str | None = None
    privileged: bool = False  # bwrap started by root: no user namespace, the worker drops
    unshare_prefix: tuple[str, ...] = ()
    budget: Budget = field(default_factory=Budget)
    cgroups: Cgroups | None = None  # None: per-process limits only
    quota_disk: bool = False  # each sandbox's writable folders on a disk of budget.disk_mb

    @property
    def complete(self) -> bool:
        """Everything the design promises: own PID namespace and /proc, own user, no network."""
        return self.mode == "bwrap"

    @property
    def notice(self) -> str | None:
        """What the first result must repeat, because the descriptions may go unread."""
        return None if self.complete else self.summary

    def confine(
        self, host_workdir: Path | None = None, inside_workdir: str | None = None
    ) -> SandboxResources:
        """A sandbox around ``host_workdir`` (None: a new one, deleted on close), seen inside
        at ``inside_workdir`` (bwrap only). Blocking (it may make a file system): call it in a
        thread from async code. SandboxResourcesError if its cgroup or disk cannot be made."""
        return SandboxResources(self, host_workdir, inside_workdir)


# The worker's seccomp filter (_sandbox_worker._forbid_user_namespaces) exists for x86_64.
_NO_USERNS = (
    ", and it cannot create user namespaces"
    if sys.platform == "linux" and os.uname().machine == "x86_64"
    else ""
)


def bwrap_summary() -> str:
    return (
        "Isolation: bubblewrap sandbox. The code runs as an unprivileged user in its own PID "
        "namespace with its own /proc, with no network (every connection fails, even to "
        "localhost), an empty environment, read-only system and Python folders, and only its "
        "work folder and /tmp writable; the user's files, secrets and other processes are out "
        f"of reach{_NO_USERNS}."
    )


_NOT_CONTAINED = (
    "Filesystem and processes: NOT isolated — the code runs as the same user and can read "
    "the user's files and other processes' environments."
)


def resources_summary(isolation: Isolation, cgroups_reason: str, disk_reason: str) -> str:
    """What limits the sandbox's memory, processes and disk, exactly as in force."""
    budget = isolation.budget
    if isolation.cgroups is not None:
        parts = [
            f"Memory: at most {budget.memory_mb} MB for all of the sandbox's processes together "
            f"(a {isolation.cgroups.description}; past it the kernel kills the largest of them), "
            f"and at most {budget.memory_mb} MB of address space per process. Processes: at "
            f"most {budget.max_processes} processes/threads together (more fail to start)."
        ]
        if isolation.mode != "bwrap" and os.geteuid() == 0:
            parts.append("The code runs as root here, so it could leave these limits.")
    else:
        parts = [
            f"Memory: at most {budget.memory_mb} MB of address space per process, NOT a total: "
            f"several processes can each use that much ({cgroups_reason})."
        ]
        parts.append(
            f"Processes: at most {budget.max_processes} processes/threads."
            if isolation.mode == "bwrap"
            else "Process count: NOT limited."
        )
    if isolation.quota_disk:
        parts.append(
            f"Disk: the work folder, /tmp and /dev/shm share {budget.disk_mb} MB; writing "
            "past it fails with 'No space left on device'."
        )
    elif isolation.mode == "bwrap":
        tmp_mb, shm_mb = budget.tmpfs_split_mb
        parts.append(
            f"Disk: /tmp holds at most {tmp_mb} MB and /dev/shm {shm_mb} MB (in memory, "
            f"{budget.disk_mb} MB together); the work folder is NOT limited beyond "
            f"{budget.max_file_mb} MB per file ({disk_reason})."
        )
    else:
        parts.append(f"Disk: NOT limited beyond {budget.max_file_mb} MB per file.")
    return " ".join(parts)


def _unshare_summary(reason: str) -> str:
    return (
        f"Isolation: network only (bubblewrap {reason}). Network: isolated (the "
        "code runs in an empty network namespace; every connection fails, even to localhost). "
        + _NOT_CONTAINED
    )


def _none_summary(reason: str) -> str:
    return (
        f"Isolation: NONE ({reason}). Network: NOT isolated; the code can open network "
        "connections. " + _NOT_CONTAINED
    )


def detect_isolation(
    requested: str = "auto", budget: Budget | None = None, *, disk_quota: bool = True
) -> Isolation:
    """The isolation to use: the strongest that works for ``auto``, else exactly the one asked,
    with the strongest resource limits that work here (cgroups, a quota disk; ``disk_quota``
    False: none, the work folder is the caller's).

    Raises ``IsolationUnavailableError`` when ``bwrap`` or ``unshare`` is asked for and does
    not work here, so a server never silently runs weaker than it was told to.
    """
    remove_stale_folders()
    isolation = _detect_mode(requested)
    return _with_resources(replace(isolation, budget=budget or Budget()), disk_quota)


def _detect_mode(requested: str) -> Isolation:
    if requested not in ISOLATION_CHOICES:
        raise ValueError(f"unknown isolation {requested!r}; choose from {ISOLATION_CHOICES}")
    if requested == "none":
        return Isolation("none", _none_summary("turned off with --isolation none"))
    bwrap_reason = "not used, as --isolation unshare asked"
    if requested in ("auto", "bwrap"):
        isolation, bwrap_reason = _probe_bwrap()
        if isolation is not None:
            return isolation
        if requested == "bwrap":
            raise IsolationUnavailableError(f"--isolation bwrap: bubblewrap {bwrap_reason}")
    isolation, unshare_reason = _probe_unshare(bwrap_reason)
    if isolation is not None:
        return isolation
    if requested == "unshare":
        raise IsolationUnavailableError(f"--isolation unshare: {unshare_reason}")
    return Isolation("none", _none_summary(f"bubblewrap {bwrap_reason}; {unshare_reason}"))


def _with_resources(isolation: Isolation, disk_quota: bool) -> Isolation:
    """``isolation`` with the cgroups and quota disk that work here, and says so."""
    cgroups, cgroups_reason = probe_cgroups(isolation.budget.cgroup_limits)
    if cgroups_reason:
        cgroups_reason = f"per-process limits only: {cgroups_reason}"
    quota_problem = "the work folder is the one the server was given"
    if disk_quota and not (isolation.mode == "bwrap" and isolation.privileged):
        quota_problem = "a quota disk needs bubblewrap started by root"
    elif disk_quota:
        quota_problem = probe_quota_disk(isolation.budget.disk_mb * 1024 * 1024)
    with_limits = replace(isolation, cgroups=cgroups, quota_disk=not quota_problem)
    sentence = resources_summary(with_limits, cgroups_reason, quota_problem)
    return replace(with_limits, summary=f"{isolation.summary} {sentence}")


def _probe_bwrap() -> tuple[Isolation | None, str]:
    bwrap = shutil.which("bwrap")
    if sys.platform != "linux" or bwrap is None:
        return None, "not found on PATH"
    isolation = Isolation("bwrap", bwrap_summary(), bwrap=bwrap, privileged=os.geteuid() == 0)
    with tempfile.TemporaryDirectory(prefix=_owned_prefix(_PROBE_PREFIX)) as folder:
        resources = isolation.confine(Path(folder), "/home/user")
        try:
            # The probe drops privileges as the worker will, which proves the sandbox user
            # can start Python from the bound folders (their parents must be traversable).
            inner = [sys.executable, "-I", "-c", _probe_code(resources.run_as)]
            argv, env, cwd = resources.command(inner)
            probe = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                env=env,
                cwd=cwd,
                timeout=_PROBE_TIMEOUT_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"failed to start ({exc})"
        finally:
            resources.close()
    if probe.returncode != 0 or probe.stdout.strip() != b"ok":
        detail = probe.stderr.decode(errors="replace").strip().splitlines()
        return None, f"does not work here ({detail[-1] if detail else probe.returncode})"
    return isolation, ""


def _probe_code(run_as: tuple[int, int] | None) -> str:
    check = "import encodings, json, ssl; print('ok')"
    if run_as is None:
        return check
    uid, gid = run_as
    return (
        f"import os; os.setgroups([]); os.setresgid({gid}, {gid}, {gid}); "
        f"os.setresuid({uid}, {uid}, {uid}); {check}"
    )


def _probe_unshare(bwrap_reason: str) -> tuple[Isolation | None, str]:
    unshare = shutil.which("unshare")
    if sys.platform != "linux" or unshare is None:
        return None, "no util-linux `unshare` on PATH"
    candidates: list[tuple[str, ...]] = [(unshare, "--user", "--map-root-user", "--net")]
    if os.geteuid() == 0:
        candidates.insert(0, (unshare, "--net"))
    for prefix in candidates:
        probe = subprocess.run(
            [*prefix, "true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=_PROBE_TIMEOUT_SECONDS,
            check=False,
        )
        if probe.returncode == 0:
            return Isolation("unshare", _unshare_summary(bwrap_reason), unshare_prefix=prefix), ""
    return None, "`unshare --net` is not permitted here"


def worker_environment(home: str) -> dict[str, str]:
    """The whole environment the model's code gets: nothing inherited from the server."""
    venv_bin = str(Path(sys.executable).parent)  # so `python` in a subprocess is this one
    return {
        "PATH": f"{venv_bin}:{SYSTEM_PATH}",
        "HOME": home,
        "TMPDIR": home,
        "LANG": "C.UTF-8",
        "MPLBACKEND": "Agg",
        "USER": "sandbox",
        "LOGNAME": "sandbox",
    }


@dataclass
class _Layout:
    """bwrap mount arguments, creating traversable (0755) parents for every mount point.

    bwrap would create missing parents itself, but as mode 0700 root directories, which the
    sandbox user could not traverse.
    """

    args: list[str] = field(default_factory=list)
    made: set[str] = field(default_factory=lambda: {"/"})
    read_only: list[str] = field(default_factory=list)

    def _parents(self, dest: str) -> None:
        parts = Path(dest).parts[1:-1]
        for depth in range(1, len(parts) + 1):
            parent = "/" + "/".join(parts[:depth])
            if parent not in self.made:
                self.args += ["--perms", "0755", "--dir", parent]
                self.made.add(parent)

    def ro_bind(self, source: str, dest: str | None = None, *, try_: bool = False) -> None:
        dest = dest or source
        if any(Path(dest).is_relative_to(root) for root in self.read_only):
            return  # already visible through an earlier read-only bind
        self._parents(dest)
        self.args += ["--ro-bind-try" if try_ else "--ro-bind", source, dest]
        self.made.add(dest)
        if Path(source).is_dir():
            self.read_only.append(dest)

    def mount(self, kind: str, dest: str, *options: str) -> None:
        self._parents(dest)
        self.args += [*options, kind, dest]
        self.made.add(dest)

    def bind(self, source: str, dest: str) -> None:
        self._parents(dest)
        self.args += ["--bind", source, dest]
        self.made.add(dest)

    def symlink(self, target: str, dest: str) -> None:
        self.args += ["--symlink", target, dest]
        self.made.add(dest)


def _python_folders() -> list[str]:
    """Where this interpreter and its packages live, as named and as really stored."""
    folders: list[str] = []
    for folder in (sys.prefix, sys.base_prefix, str(Path(sys.executable).parent)):
        for variant in (os.path.abspath(folder), os.path.realpath(folder)):
            if variant not in folders:
                folders.append(variant)
    return folders


class SandboxResources:
    """One sandbox's place on this machine: its work folder, its user, its cgroup and disk,
    how to start in it."""

    def __init__(self, isolation: Isolation, host_workdir: Path | None, inside: str | None) -> None:
        self.isolation = isolation
        bwrap = isolation.mode == "bwrap"
        self.run_as: tuple[int, int] | None = None
        self._support: Path | None = None
        self.cgroup: SandboxCgroup | None = None
        self.disk: QuotaDisk | None = None
        self._own_workdir: Path | None = None  # made here, so deleted here
        if bwrap and isolation.privileged:
            sandbox_id = _SANDBOX_IDS[0] + secrets.randbelow(_SANDBOX_IDS[1] - _SANDBOX_IDS[0])
            self.run_as = (sandbox_id, sandbox_id)
        try:  # on any failure, what was made so far goes (no cgroup or disk is left behind)
            self.host_workdir = self._make_places(host_workdir)
            self.inside_workdir = inside if bwrap and inside else str(self.host_workdir)
            if self.run_as is not None:
                _hand_over(self.host_workdir, self.run_as[0])
            if bwrap:
                self._support = Path(tempfile.mkdtemp(prefix=_owned_prefix(_SUPPORT_PREFIX)))
                self._write_accounts()
        except BaseException:
            self.close()
            raise

    def _make_places(self, host_workdir: Path | None) -> Path:
        """Make the cgroup and the quota disk the isolation has; return the work folder."""
        isolation = self.isolation
        try:
            if isolation.cgroups is not None:
                self.cgroup = isolation.cgroups.create(isolation.budget.cgroup_limits)
            if isolation.quota_disk and host_workdir is None:
                assert self.run_as is not None  # a quota disk is only probed for as root
                self.disk = QuotaDisk(isolation.budget.disk_mb * 1024 * 1024, self.run_as)
                return self.disk.home
        except (CgroupsUnavailableError, DiskQuotaUnavailableError, OSError) as exc:
            raise SandboxResourcesError(f"the sandbox's limits could not be set up: {exc}") from exc
        if host_workdir is not None:
            return host_workdir
        self._own_workdir = Path(tempfile.mkdtemp(prefix=_owned_prefix(_WORK_PREFIX)))
        return self._own_workdir

    def limit_marks(self) -> bool:
        """Taken just before a call: forgets the cgroup events so far (a background
        process's, say, which are not the call's doing) and says whether the disk is full."""
        if self.cgroup is not None:
            self.cgroup.new_events()
        return self.disk is not None and self.disk.full()

    def limit_report(self, disk_full_before: bool, output: str) -> str | None:
        """What the sandbox ran into during one call (``limit_marks`` was taken just before
        it; ``output`` is what it printed and raised): memory, processes, disk."""
        found: list[str] = []
        budget = self.isolation.budget
        if self.cgroup is not None:
            oom_kills, fork_failures = self.cgroup.new_events()
            if oom_kills:
                found.append(
                    f"The sandbox ran out of memory: its processes together reached the "
                    f"{budget.memory_mb} MB limit and the kernel killed {oom_kills} of them."
                )
            if fork_failures:
                found.append(
                    f"The sandbox reached its limit of {budget.max_processes} processes/"
                    f"threads: {fork_failures} attempt(s) to start one more failed."
                )
        # A disk left full by an earlier call is a state, not this call's failure: only
        # filling it now, or a write of this call refused for room, counts.
        if self.disk is not None and (
            (self.disk.full() and not disk_full_before) or _NO_SPACE in output
        ):
            found.append(
                f"The sandbox's disk is full: the work folder, /tmp and /dev/shm share "
                f"{budget.disk_mb} MB. Delete files to make room."
            )
        return "\n".join(found) or None

    @property
    def worker_script(self) -> str:
        return _WORKER_INSIDE if self.isolation.mode == "bwrap" else str(_WORKER_SCRIPT)

    def process_limit(self, budget: int) -> int | None:
        """RLIMIT_NPROC for the worker, or None where it would not hold (the same user)."""
        if self.isolation.mode != "bwrap":
            return None
        if self.run_as is not None:
            return budget + _tasks_of(self.run_as[0])  # 0 unless the uid was already in use
        # In a user namespace the limit counts all of the real user's tasks.
        return budget + _tasks_of(os.getuid())

    def command(self, inner: list[str]) -> tuple[list[str], dict[str, str], str]:
        """(argv, environment, cwd) that run ``inner`` inside this sandbox."""
        env = worker_environment(self.inside_workdir)
        # Joined before bwrap starts, so every process of the sandbox is born in the group.
        join = self.cgroup.join_command() if self.cgroup is not None else []
        if self.isolation.mode == "unshare":
            return [*join, *self.isolation.unshare_prefix, *inner], env, str(self.host_workdir)
        if self.isolation.mode == "none":
            return [*join, *inner], env, str(self.host_workdir)
        argv = self._bwrap_argv()
        for name, value in env.items():
            argv += ["--setenv", name, value]
        # bwrap itself gets an empty environment: inside, /proc/1/environ is bwrap's.
        return [*join, *argv, "--", *inner], {}, "/"

    def _bwrap_argv(self) -> list[str]:
        isolation = self.isolation
        assert isolation.bwrap is not None and self._support is not None
        argv = [isolation.bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc"]
        argv += ["--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"]
        argv += ["--die-with-parent", "--new-session", "--clearenv"]
        if not isolation.privileged:
            ids = str(_USERNS_ID)
            argv += ["--unshare-user", "--uid", ids, "--gid", ids, "--disable-userns"]
        layout = _Layout()
        layout.ro_bind("/usr")
        for name in _TOP_LEVEL:
            host = Path("/", name)
            if host.is_symlink():
                layout.symlink(os.readlink(host), str(host))
            elif host.is_dir():
                layout.ro_bind(str(host))
        layout.mount("--dir", "/etc", "--perms", "0755")
        for entry in _ETC_ENTRIES:
            layout.ro_bind(f"/etc/{entry}", try_=True)
        for name in ("passwd", "group"):
            layout.ro_bind(str(self._support / name), f"/etc/{name}")
        layout.mount("--proc", "/proc")
        layout.mount("--dev", "/dev")
        if self.disk is not None:  # one quota for the work folder, /tmp and /dev/shm
            layout.bind(str(self.disk.shm), "/dev/shm")
            layout.bind(str(self.disk.tmp), "/tmp")
        else:  # RAM-backed: capped together so they cannot fill the host's memory
            tmp_mb, shm_mb = self.isolation.budget.tmpfs_split_mb
            for mb, dest in ((shm_mb, "/dev/shm"), (tmp_mb, "/tmp")):
                layout.mount("--tmpfs", dest, "--perms", "1777", "--size", str(mb * 1024 * 1024))
        # After /tmp's tmpfs, which would otherwise hide an interpreter (a checkout's
        # .venv, say) or a work folder that lives under the host's /tmp.
        for folder in _python_folders():
            layout.ro_bind(folder)
        layout.ro_bind(str(_WORKER_SCRIPT), _WORKER_INSIDE)
        layout.bind(str(self.host_workdir), self.inside_workdir)
        return [*argv, *layout.args, "--chdir", self.inside_workdir]

    def _write_accounts(self) -> None:
        """A passwd/group naming only root and the sandbox user (the host's stay private)."""
        assert self._support is not None
        uid, gid = self.run_as or (_USERNS_ID, _USERNS_ID)
        home = self.inside_workdir
        (self._support / "passwd").write_text(
            "root:x:0:0:root:/root:/usr/sbin/nologin\n"
            f"sandbox:x:{uid}:{gid}:sandbox:{home}:/bin/sh\n"
        )
        (self._support / "group").write_text(f"root:x:0:\nsandbox:x:{gid}:\n")
        for path in (self._support, self._support / "passwd", self._support / "group"):
            path.chmod(0o755 if path.is_dir() else 0o644)

    def close(self) -> None:
        """Kill what is left in the cgroup, then remove it, the disk and the folders.
        Synchronous: also called from a SIGTERM handler."""
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None
        if self.disk is not None:
            self.disk.close()
            self.disk = None
        for folder in (self._support, self._own_workdir):
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
        self._support = self._own_workdir = None


def _owned_prefix(prefix: str) -> str:
    return f"{prefix}{os.getpid()}-"


def remove_stale_folders() -> None:
    """Delete the sandbox folders that killed servers left in the temp dir."""
    for prefix in (_SUPPORT_PREFIX, _WORK_PREFIX, _PROBE_PREFIX):
        pattern = re.compile(re.escape(prefix) + r"(\d+)-")
        for folder in Path(tempfile.gettempdir()).glob(f"{prefix}*"):
            match = pattern.match(folder.name)
            if match is not None and not owner_alive(int(match.group(1))):
                shutil.rmtree(folder, ignore_errors=True)


def _hand_over(folder: Path, owner: int) -> None:
    """Give the work folder (and what an earlier run left in it) to the sandbox user."""
    os.lchown(folder, owner, owner)
    folder.chmod(0o700)
    for root, dirs, files in os.walk(folder):
        for name in (*dirs, *files):
            os.lchown(os.path.join(root, name), owner, owner)


def _tasks_of(uid: int) -> int:
    """How many tasks (threads count, as for RLIMIT_NPROC) the real uid ``uid`` has now."""
    count = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:  # the process ended while we looked
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        if fields.get("Uid", "").split()[:1] == [str(uid)]:
            count += int(fields.get("Threads", "1").strip() or 1)
    return count
