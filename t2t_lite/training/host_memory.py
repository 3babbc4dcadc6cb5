"""Keeping freed host memory for reuse: glibc malloc settings for training processes."""

import ctypes
import platform

# mallopt parameters, from glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2

_applied = False


def retain_freed_memory(top_pad_bytes: int = 1 << 30) -> bool:
    """Has glibc's malloc keep freed memory in the process instead of returning it.

    By default glibc gives memory back to the kernel as soon as a large enough block at
    the top of a heap is free, and grows heaps by no more than each request needs. A
    training step frees and reallocates the same few hundred megabytes of activations,
    logits and gradients every update, so each update then faults those pages in again
    (tens of thousands of page faults per transformer_base update). With trimming off and
    heaps grown `top_pad_bytes` at a time, the pages stay mapped after the first updates
    and are reused (docs/benchmarks.md has the measured gain). The process's resident size
    then stays at its peak, which a training process reaches every update anyway.

    Process-wide and idempotent; does nothing where the C library is not glibc.

    Returns:
        True if the settings are in effect.
    """
    global _applied
    if _applied:
        return True
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    trim = mallopt(_M_TRIM_THRESHOLD, 2**31 - 1)
    pad = mallopt(_M_TOP_PAD, min(top_pad_bytes, 2**31 - 1))
    _applied = bool(trim and pad)
    return _applied
