"""`fleet compare --dask`: the sweep's batches on a Dask cluster, an existing one or a `LocalCluster` started here.

The batches are the very values and functions the local processes run (`fleet.sweep`
hands them to an engine), so a cluster gives the same months; only where they run
changes. dask is an optional extra: nothing outside this module imports it, and this
module imports it only when an engine is opened.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import tempfile
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

from fleet.memory import keep_freed_memory
from fleet.core.errors import ConfigError
from fleet.core.units import seconds_setting

INSTALL_HINT = "pip install -e '.[dask]' in the checkout"
LOCAL = "local"
"""`--dask local`: start a cluster of local worker processes for this run."""
DEFAULT_LOCAL_WORKERS = 2
CONNECT_TIMEOUT_S = 10.0
"""How long a scheduler has to answer, and then to have at least one worker, before the run gives up
(`FLEET_DASK_CONNECT_TIMEOUT` seconds when set)."""
CONNECT_TIMEOUT_ENV = "FLEET_DASK_CONNECT_TIMEOUT"


class ClusterUnreachable(OSError):
    """No Dask scheduler (with a worker) answered at the address given: a run-time failure, exit status 1."""


def connect_timeout_s() -> float:
    """The connect timeout: `FLEET_DASK_CONNECT_TIMEOUT` seconds if set, else 10 s."""
    return seconds_setting(CONNECT_TIMEOUT_ENV, os.environ.get(CONNECT_TIMEOUT_ENV), CONNECT_TIMEOUT_S,
                           what="the connect timeout", allow_zero=False)


def _distributed():
    try:
        import distributed
    except ModuleNotFoundError as err:
        raise ConfigError(f"--dask: dask is not installed ({err.name} is missing); install the extra: {INSTALL_HINT}") from None
    return distributed


async def _identity(address: str, timeout_s: float) -> Any:
    from distributed.comm import connect

    comm = await connect(address, timeout=timeout_s)
    try:
        await comm.write({"op": "identity", "reply": True})
        return await comm.read()
    finally:
        comm.abort()


def _probe(address: str, timeout_s: float) -> None:
    """Ask the address who it is, within `timeout_s` in all: `Client` itself can wait forever on a port that
    accepts the connection and never answers (a dashboard's HTTP port given by mistake)."""
    try:
        who = asyncio.run(asyncio.wait_for(_identity(address, timeout_s), timeout_s))
    except ValueError as err:  # the address cannot be parsed
        raise ConfigError(f"--dask {address!r}: not a scheduler address ({err}); expected tcp://HOST:PORT or 'local'") from None
    except asyncio.TimeoutError:
        raise ClusterUnreachable(f"--dask {address!r}: no Dask scheduler answered within {timeout_s:g} s") from None
    except Exception as err:  # refused, unreachable, or bytes that are not Dask's protocol
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ClusterUnreachable(f"--dask {address!r}: no Dask scheduler answered ({reason})") from None
    if not isinstance(who, dict) or who.get("type") != "Scheduler":
        raise ClusterUnreachable(f"--dask {address!r}: answered, but is not a Dask scheduler")


@contextmanager
def _workers_ignore_ctrl_c():
    """Start local workers with Ctrl-C ignored (an ignored signal is inherited through exec), so a Ctrl-C at the
    terminal, which reaches the whole process group, stops this process alone and it closes the cluster: no
    worker prints its own KeyboardInterrupt traceback. A Ctrl-C during the few seconds of start-up is lost."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _on_worker(fn: Callable, *args: Any) -> Any:
    """`fn(*args)` with glibc told to keep freed memory, as `fleet` tells itself (and so its forked processes): a
    Dask worker is a process of its own, started with Dask's small malloc trim threshold, under which each
    replay's large temporaries are mapped and faulted in afresh."""
    keep_freed_memory()
    return fn(*args)


class DaskEngine:
    """A sweep engine on a Dask cluster: one task per batch, results yielded as their futures complete."""

    def __init__(self, client, cluster=None, scratch: str | None = None):
        self.client = client
        self._cluster = cluster  # started here (`--dask local`), so closed here
        self._scratch = scratch  # its workers' scratch folder, removed when it is closed
        self.slots = max(1, sum(client.nthreads().values()))

    @classmethod
    def open(cls, address: str, jobs: int | None = None, timeout_s: float | None = None) -> "DaskEngine":
        """Connect to the scheduler at `address`, or with `local` start `jobs` (default 2) single-threaded worker
        processes on 127.0.0.1 with no dashboard."""
        distributed = _distributed()
        timeout_s = connect_timeout_s() if timeout_s is None else timeout_s
        if address == LOCAL:
            # The workers' scratch space in a folder of this run's own, removed with the cluster (Dask's default,
            # dask-scratch-space in the temporary folder, outlives it).
            scratch = tempfile.mkdtemp(prefix="fleet-dask-")
            import dask

            with _workers_ignore_ctrl_c(), dask.config.set({"temporary-directory": scratch}):
                cluster = distributed.LocalCluster(
                    local_directory=scratch,
                    n_workers=jobs or DEFAULT_LOCAL_WORKERS, threads_per_worker=1, processes=True, host="127.0.0.1",
                    # No dashboard; the scheduler's small HTTP server on a free port of 127.0.0.1, not on 8787.
                    dashboard_address=None, scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"},
                    silence_logs=logging.ERROR,
                )
            try:
                return cls(distributed.Client(cluster, set_as_default=False), cluster, scratch)
            except BaseException:
                cluster.close()
                shutil.rmtree(scratch, ignore_errors=True)
                raise
        _probe(address, timeout_s)
        client = distributed.Client(address, timeout=timeout_s, set_as_default=False)
        try:
            client.wait_for_workers(1, timeout=timeout_s)
        except (TimeoutError, asyncio.TimeoutError):
            client.close()
            raise ClusterUnreachable(f"--dask {address!r}: the scheduler has no worker (none joined within {timeout_s:g} s)") from None
        except BaseException:
            client.close()
            raise
        return cls(client)

    def run(self, fn: Callable, work: Sequence, common: Any = None) -> Iterator[tuple[int, Any]]:
        from distributed import as_completed

        # The common argument (a stored month) goes to every worker once, not once per task.
        extra = () if common is None else (self.client.scatter(common, broadcast=True, hash=False),)
        futures = [self.client.submit(_on_worker, fn, item, *extra, pure=False) for item in work]
        index = {f.key: i for i, f in enumerate(futures)}
        try:
            for f in as_completed(futures, loop=self.client.loop):
                yield index[f.key], f.result()
        finally:
            # A failed or interrupted sweep leaves nothing queued or running on the cluster.
            pending = [f for f in futures if not f.done()]
            if pending:
                self.client.cancel(pending)

    def close(self, cancel: bool) -> None:
        self.client.close()
        if self._cluster is not None:
            self._cluster.close()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
