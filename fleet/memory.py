"""Process settings for large months: keep freed memory for reuse, and BLAS on one thread.

A replay of a large pool allocates and frees many (cards × hours) temporaries.
glibc's malloc serves each block above its mmap threshold (at most 32 MiB) with a
fresh mapping and unmaps it on free, so every such temporary pays its page faults
again, and on a virtual machine a page fault is dear. Raising the thresholds keeps freed memory in the
process for the next temporary. The peak resident memory does not change.

The bill multiplies rent by blocks of run sets (cards × hours) with BLAS. Those
products are small, and a threaded BLAS spends more time waking and waiting on its
threads than computing them, above all on busy cores; one thread gives the same
bytes out. So the `fleet` command runs BLAS on one thread unless the environment says otherwise.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_BYTES = 1 << 30  # blocks up to 1 GiB come from the heap, where freed ones are reused
_TRIM_BYTES = (1 << 31) - 1  # free heap kept up to 2 GiB: a replay frees more than 1 GiB at once


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to reuse freed memory instead of returning it to the system; False where there is no glibc."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_BYTES))


def one_blas_thread() -> bool:
    """Run BLAS on one thread (`OPENBLAS_NUM_THREADS=1`, read when numpy loads it, and inherited by the processes a
    sweep starts), unless one of `BLAS_THREAD_VARIABLES` is set already: the user's choice stands. False when it
    cannot apply: numpy is loaded already, or the user chose."""
    if "numpy" in sys.modules or any(v in os.environ for v in BLAS_THREAD_VARIABLES):
        return False
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    return True
