"""Process memory settings for large months: keep freed memory for reuse.

A replay of a large pool allocates and frees many (cards × hours) temporaries.
glibc's malloc serves each block above its mmap threshold (at most 32 MiB) with a
fresh mapping and unmaps it on free, so every such temporary pays its page faults
again; on a virtual machine, where a page fault is dear, that was about 40% of a
100,000-card replay's CPU time. Raising the thresholds keeps freed memory in the
process for the next temporary. The peak resident memory does not change.
"""

from __future__ import annotations

import ctypes
import ctypes.util

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
