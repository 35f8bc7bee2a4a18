"""The decision journal and the actuators that carry decisions out.

Every decision is journaled before anything acts on it: an hour's decisions and
the run-set state they leave are written in one transaction, and only then does
the actuator see them, one at a time, in journal order. Each decision has a
deterministic key and an `acted_ts`; `act_pending` acts on journaled decisions
whose `acted_ts` is still empty and marks what it carried out in batches, one
transaction each (a failed one is retried or set aside with a record: `acting.py`).
So a restart acts on journaled-but-not-acted decisions, and never on marked
ones again. The window left (actions returned, the process died before their
batch was marked: at most `ACT_BATCH_SIZE` of them) is closed by the receiver:
commands and webhooks get the decision's key (`FLEET_DECISION_KEY`, the
`Idempotency-Key` header), the same on every offer, to drop a repeat.

Actuators: `dry-run` (the default: log only), `command` (run a program per
decision, the decision as JSON on stdin and in environment variables) and
`webhook` (POST the decision as JSON). A command's program gets only the environment the config names
(`pass_env`, `env`) and the decision's variables: never the service's database URL or a token. Every action carries the epoch of the
leader's lease it is acted under, so a receiver can also refuse a stale leader.
No action outlives its call: a command's whole process group is killed on
timeout, at exit, on `close()` and when the service dies; a webhook never
follows a redirect.
"""

from __future__ import annotations

import json
import logging
import os
import select
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from fleet.core.errors import ConfigError
from fleet.core.retry import PERMANENT, TRANSIENT, RetryRules
from fleet.credentials import Credentials, http_opener
from fleet.service.acting import ACTIONS, ActOutcome, Acting, ActuatorError, ActuatorStopped

__all__ = ["ACTIONS", "ActOutcome", "Actuator", "ActuatorError", "ActuatorStopped", "Command", "DryRun", "Journal",
           "Webhook", "decision_payload"]
from storage.db import hide_passwords
from storage.interfaces import JournalStore
from storage.values import JournalEntry, JournalRow

log = logging.getLogger("fleet.service.journal")

EX_TEMPFAIL = 75
"""A command's exit status for "try again later" (sysexits.h): a transient failure, retried with backoff."""

DEFAULT_PASS_ENV = ("PATH", "LANG", "LC_ALL", "TZ")
"""What a command's program gets from the service's environment unless `[actuator] pass_env` says otherwise."""


def decision_payload(row: JournalRow, epoch: int | None = None) -> dict:
    return {
        "id": row.id,
        "epoch": epoch,
        "key": row.key,
        "kind": row.kind,
        "card": row.card_key,
        "ts": row.ts,
        "reason": row.reason,
        "detail": row.detail,
    }


class Actuator(Protocol):
    name: str

    def act(self, row: JournalRow, epoch: int | None = None) -> None:
        """Carry out one decision journaled under lease `epoch`; raise ActuatorError if it did not go through."""

    def close(self) -> None:
        """Stop whatever is still running; the service calls it on its way out."""


class DryRun:
    """Log the decision and do nothing else."""

    name = "dry-run"

    def act(self, row: JournalRow, epoch: int | None = None) -> None:
        log.info("dry-run %s %s: %s", row.kind, row.card_key, row.reason)

    def close(self) -> None:
        pass


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


def _http_outcome(code: int) -> str:
    """5xx and 429 (the receiver is busy or down) are transient; any other 4xx is the receiver's "no" to this
    request, so retrying it cannot help."""
    return TRANSIENT if code >= 500 or code in (408, 429) else PERMANENT


@dataclass
class Webhook:
    """POST each decision as JSON to `url`, with its key as the Idempotency-Key header; any 2xx means done.

    A redirect is a failure (never followed), certificates are checked (the default SSL context), and `timeout_s`
    bounds the connection and each wait for the server. The Authorization header goes only to `url`, and no error or
    log line carries it."""

    url: str
    timeout_s: float = 30.0
    auth: Credentials | None = None
    name: str = "webhook"
    _opener: urllib.request.OpenerDirector = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._opener = http_opener()

    def act(self, row: JournalRow, epoch: int | None = None) -> None:
        shown = hide_passwords(self.url)
        body = json.dumps(decision_payload(row, epoch)).encode()
        headers = {"Content-Type": "application/json", "Idempotency-Key": row.key or str(row.id)}
        if epoch is not None:
            headers["Fleet-Lease-Epoch"] = str(epoch)
        if self.auth is not None:
            try:
                headers.update(self.auth.headers())
            except ConfigError as err:  # a token file being rotated: retried on the next pass
                raise ActuatorError(f"actuator webhook {shown!r}: {err}") from None
        req = urllib.request.Request(self.url, data=body, method="POST", headers=headers)
        try:
            with self._opener.open(req, timeout=self.timeout_s) as resp:
                status = resp.status
        except urllib.error.HTTPError as err:
            location = err.headers.get("Location") if err.headers is not None else None
            err.close()
            if 300 <= err.code < 400:
                raise ActuatorError(f"actuator webhook {shown!r}: HTTP {err.code} redirect to "
                                    f"{hide_passwords(location or '(no Location)')!r}, not followed") from None
            raise ActuatorError(f"actuator webhook {shown!r}: HTTP {err.code}", outcome=_http_outcome(err.code)) from None
        except (urllib.error.URLError, OSError) as err:  # no answer: refused, reset, timed out
            raise ActuatorError(f"actuator webhook {shown!r}: {hide_passwords(str(err))}") from None
        if not 200 <= status < 300:
            raise ActuatorError(f"actuator webhook {shown!r}: HTTP {status}", outcome=_http_outcome(status))

    def close(self) -> None:
        pass


class Journal:
    """Journal first, act second; acting is at most once per decision as far as the journal can see."""

    def __init__(self, store: JournalStore, actuator: Actuator, now: Callable[[], float], rules: RetryRules | None = None,
                 rng=None, wall_seconds: Callable[[float], float] = lambda s: s):
        self.store = store
        self.actuator = actuator
        self.now = now
        self.acting = Acting(store, actuator, now, rules, rng, wall_seconds=wall_seconds)
        self.wake: Callable[[], None] | None = None  # set while a separate act job runs the passes (`fleet serve`)

    def write(
        self, hour_ts: int, entries: Sequence[JournalEntry], open_cards: dict[str, str], close_cards: Sequence[str],
        retire_cards: Sequence[str],
    ) -> bool:
        return self.store.journal_hour(hour_ts, entries, open_cards, close_cards, retire_cards)

    def act_pending(self, stop: Callable[[], bool] = lambda: False, epoch: int | None = None) -> ActOutcome:
        """Act on every journaled, unacted decision that is due, in journal order per card, under lease `epoch`;
        failures are retried or set aside (`fleet.service.acting`), never raised, and never hold another card."""
        return self.acting.run_pass(stop, epoch)

    def act_soon(self, stop: Callable[[], bool] = lambda: False, epoch: int | None = None) -> ActOutcome | None:
        """What the decide job calls after journaling: with an act job running, wake it and return at once (deciding
        never waits on acting); without one (jobs stepped by hand), act now."""
        if self.wake is not None:
            self.wake()
            return None
        return self.act_pending(stop, epoch)
