"""The command actuator: a program run once per decision, the decision as JSON on stdin and in FLEET_* variables.

A command's program gets only the environment the config names (`pass_env`, `env`) and the decision's variables:
never the service's database URL or a token. No action outlives its call: its whole process group is killed on
timeout, at exit, on `close()` and when the service dies. It gets the decision's key (`FLEET_DECISION_KEY`), the
same on every offer, to drop a repeat, and the epoch of the leader's lease, to refuse a stale leader.
"""

from __future__ import annotations

import json
import os
import select
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import Field, model_validator

from fleet.core.retry import PERMANENT
from fleet.core.scenario import Strict
from fleet.service.acting import ActuatorError, ActuatorStopped
from fleet.service.actuators.base import decision_payload
from storage.values import JournalRow

EX_TEMPFAIL = 75
"""A command's exit status for "try again later" (sysexits.h): a transient failure, retried with backoff."""

DEFAULT_PASS_ENV = ("PATH", "LANG", "LC_ALL", "TZ")
"""What a command's program gets from the service's environment unless `[actuator.command] pass_env` says otherwise."""

STDERR_TAIL_BYTES = 4096
"""How much of a failing command's stderr is kept (its end) for the error message; the rest is read and dropped."""

# The program a command actuator's action runs under, in place of the action itself. It exists because the
# parent-death signal must be set between fork and exec, and subprocess's preexec_fn is unsafe in a process with
# threads (the service has a scheduler pool and an HTTP server). It is its process group's leader (the service starts
# it with start_new_session), asks Linux for SIGTERM when the service dies, and on SIGTERM kills the whole group:
# the action and anything the action started. If the service died before the signal was set, its parent is no longer
# the service, and it ends at once. Otherwise it runs the action, waits, and exits as the action did.
_SUPERVISOR = r"""
import os, signal, sys
service_pid, argv = int(sys.argv[1]), sys.argv[2:]
signal.signal(signal.SIGTERM, lambda signum, frame: os.killpg(0, signal.SIGKILL))
if sys.platform.startswith("linux"):
    import ctypes
    if ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0) != 0:  # 1 = PR_SET_PDEATHSIG
        sys.stderr.write("cannot set the parent-death signal\n")
        os._exit(126)
if os.getppid() != service_pid:
    os.killpg(0, signal.SIGKILL)
pid = os.fork()
if pid == 0:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        os.execvp(argv[0], argv)
    except OSError as err:
        sys.stderr.write(f"cannot run {argv[0]!r}: {err.strerror}\n")
    os._exit(127)
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
if code < 0:
    try:
        signal.signal(-code, signal.SIG_DFL)
    except (OSError, ValueError):
        pass
    os.kill(os.getpid(), -code)
    os._exit(128 - code)
os._exit(code)
"""


def _exited(proc: subprocess.Popen) -> bool:
    """Whether `proc` has exited, without reaping it where the system allows (so its group id stays reserved)."""
    if hasattr(os, "waitid"):
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    return proc.poll() is not None


def _exchange(proc: subprocess.Popen, payload: bytes, deadline: float) -> tuple[bytes, bool]:
    """Write `payload` to the process's stdin and keep the end of its stderr until it exits or `deadline`
    (time.monotonic) passes; returns (stderr tail, timed out). Memory stays bounded however much it writes."""
    tail = bytearray()
    sel = selectors.DefaultSelector()
    try:
        pidfd: int | None = os.pidfd_open(proc.pid)  # readable when it exits: no polling
    except (AttributeError, OSError):  # not Linux, or a kernel before 5.3
        pidfd = None
    view, sent = memoryview(payload), 0
    assert proc.stdin is not None and proc.stderr is not None
    try:
        if view:
            sel.register(proc.stdin, selectors.EVENT_WRITE, "stdin")
        else:
            proc.stdin.close()
        sel.register(proc.stderr, selectors.EVENT_READ, "stderr")
        if pidfd is not None:
            sel.register(pidfd, selectors.EVENT_READ, "exit")
        while not _exited(proc):
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(tail), True
            for key, _ in sel.select(left if pidfd is not None else min(left, 0.05)):
                if key.data == "stdin":
                    try:
                        sent += os.write(proc.stdin.fileno(), view[sent : sent + select.PIPE_BUF])
                    except BrokenPipeError:  # the program exited or closed stdin without reading it all
                        sent = len(view)
                    if sent >= len(view):
                        sel.unregister(proc.stdin)
                        proc.stdin.close()
                elif key.data == "stderr":
                    chunk = os.read(proc.stderr.fileno(), 65536)
                    if not chunk:
                        sel.unregister(proc.stderr)
                    tail += chunk
                    del tail[:-STDERR_TAIL_BYTES]
        if proc.stderr in {k.fileobj for k in sel.get_map().values()}:  # what it wrote before exiting, no more
            os.set_blocking(proc.stderr.fileno(), False)
            try:
                while chunk := os.read(proc.stderr.fileno(), 65536):
                    tail += chunk
                    del tail[:-STDERR_TAIL_BYTES]
            except BlockingIOError:
                pass
        return bytes(tail), False
    finally:
        sel.close()
        if pidfd is not None:
            os.close(pidfd)


class CommandSettings(Strict):
    """The command actuator's table, `[actuator.command]`: the program and its arguments, how long an action may run,
    further tries of a permanent failure (an exit status other than 0 and 75) before it is set aside, and the
    environment it gets: `pass_env` (names copied from the service's environment) and `env` (fixed values), then the
    decision's FLEET_* variables."""

    command: tuple[str, ...] = ()
    timeout_s: float = Field(default=60, gt=0)
    retries: int = Field(default=2, ge=0)
    pass_env: tuple[str, ...] = DEFAULT_PASS_ENV
    env: dict[str, str] = {}

    @model_validator(mode="after")
    def _runnable(self) -> "CommandSettings":
        if not self.command:
            raise ValueError("the command actuator needs command = [program, args...]")
        for name in (*self.pass_env, *self.env):
            if name == "FLEET_DB" or name.startswith(("FLEET_DECISION", "FLEET_LEASE", "FLEET_CARD")):
                raise ValueError(f"pass_env/env: {name!r} is the service's own (the database URL, or set per decision)")
        return self


@dataclass
class Command:
    """Run `argv` once per decision: JSON on stdin, FLEET_DECISION_* in the environment; exit 0 means done.

    Each action runs in its own process group, and nothing in that group outlives the action's call: the group is
    killed on timeout, when the program exits (whatever it left running in the background), when `close()` is called,
    and, on Linux, when the service dies (even by SIGKILL), through the supervisor above. Its parent-death signal
    follows the *thread* that forked it; that thread is the one that waits for the action in `act`, and it does not
    return before the group is killed and reaped, so a scheduler thread's exit can never fire it early or late.
    stdout is discarded; the last STDERR_TAIL_BYTES of stderr go into the error of a failed action.
    """

    argv: Sequence[str]
    timeout_s: float = 60.0
    name: str = "command"
    pass_env: Sequence[str] = DEFAULT_PASS_ENV  # names copied from the service's environment, if set there
    env: Mapping[str, str] = field(default_factory=dict)  # fixed values the config gives
    retries: int = 2  # more tries of a permanent failure (exit status other than 0 and 75) before it is set aside
    _running: set = field(default_factory=set, init=False, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)
    _closed: bool = field(default=False, init=False, repr=False, compare=False)

    @classmethod
    def of(cls, settings: CommandSettings) -> "Command":
        return cls(settings.command, settings.timeout_s, pass_env=settings.pass_env, env=dict(settings.env),
                   retries=settings.retries)

    def check(self) -> tuple[bool, str]:
        """`fleet serve --check`: the program is found on the service's PATH."""
        found = shutil.which(self.argv[0])
        return found is not None, f"command {self.argv[0]!r}: {found or 'not found on PATH'}"

    def environment(self, row: JournalRow, epoch: int | None) -> dict[str, str]:
        """The program's whole environment: what the config names, then the decision and the lease's epoch.
        Nothing else of the service's passes (its database URL and any token stay with it)."""
        env = {k: os.environ[k] for k in self.pass_env if k in os.environ}
        env.update(self.env)
        env.update(
            {
                "FLEET_LEASE_EPOCH": "" if epoch is None else str(epoch),
                "FLEET_DECISION_ID": str(row.id),
                "FLEET_DECISION_KEY": row.key or "",
                "FLEET_DECISION_KIND": row.kind,
                "FLEET_CARD": row.card_key or "",
                "FLEET_DECISION_TS": str(row.ts),
            }
        )
        return env

    def act(self, row: JournalRow, epoch: int | None = None) -> None:
        program = self.argv[0]
        env = self.environment(row, epoch)
        permanent = {"outcome": PERMANENT, "max_tries": 1 + self.retries}
        if shutil.which(program, path=env.get("PATH", os.defpath)) is None:
            raise ActuatorError(f"actuator command {program!r}: not found or not executable", **permanent)
        payload = json.dumps(decision_payload(row, epoch)).encode()
        deadline = time.monotonic() + self.timeout_s
        with self._lock:  # so that close() either sees this process or runs before it is started
            if self._closed:
                raise ActuatorStopped(f"actuator command {program!r}: not started, the service is stopping")
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-I", "-S", "-c", _SUPERVISOR, str(os.getpid()), *self.argv],
                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                    start_new_session=True,
                )
            except OSError as err:
                raise ActuatorError(f"actuator command {program!r}: cannot start ({err.strerror or err})") from None
            self._running.add(proc)
        try:
            tail, timed_out = _exchange(proc, payload, deadline)
        finally:
            self._end(proc)
        said = " ".join(tail.decode(errors="replace").split())
        code = proc.returncode
        if code == 0 and not timed_out:
            return
        if self._closed:
            raise ActuatorStopped(f"actuator command {program!r}: killed, the service is stopping")
        if timed_out:
            raise ActuatorError(f"actuator command {program!r}: still running after {self.timeout_s:g} s, "
                                f"its process group was killed" + (f": {said}" if said else ""))
        how = f"exited {code}" if code > 0 else f"killed by {signal.Signals(-code).name}"
        if code == EX_TEMPFAIL:
            raise ActuatorError(f"actuator command {program!r} {how} (try again later)" + (f": {said}" if said else ""))
        raise ActuatorError(f"actuator command {program!r} {how}" + (f": {said}" if said else ""), **permanent)

    def _end(self, proc: subprocess.Popen) -> None:
        """Kill what is left of the action's process group, then reap its leader (not before: until the leader is
        reaped, its pid, which is the group's id, cannot be given to another process)."""
        with self._lock:
            _kill_group(proc)
            self._running.discard(proc)
        proc.wait()
        for pipe in (proc.stdin, proc.stderr):
            if pipe is not None:
                pipe.close()

    def close(self) -> None:
        """Kill every running action's process group; no action starts after this. The calls that started them
        raise ActuatorStopped, so their decisions stay unacted and count no try."""
        with self._lock:
            self._closed = True
            for proc in self._running:
                _kill_group(proc)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # the group is already empty
        pass
