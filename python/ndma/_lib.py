"""Loading libndma (the C library) and declaring its functions for ctypes."""

import ctypes
import ctypes.util
import os

# Error codes of ndma.h.
OK = 0
ERR_ARG = 1
ERR_ENV = 2
ERR_NO_SWITCH = 3
ERR_RENDEZVOUS = 4
ERR_AUTH = 5
ERR_RANK = 6
ERR_TIMEOUT = 7
ERR_CLOSED = 8
ERR_INTERNAL = 9
ERR_POOL = 10

# Optimizer rules of ndma.h.
OPTIM_SGD, OPTIM_ADAM = 1, 2

# Data types and reductions of ndma.h.
FLOAT32, FLOAT64, INT32, INT64 = 1, 2, 3, 4
SUM, PROD, MIN, MAX = 1, 2, 3, 4

ABI_VERSION = 1

# ndma_notify_fn: void (*)(void *arg).
NOTIFY_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class Config(ctypes.Structure):
    """struct ndma_config."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("rank", ctypes.c_int),
        ("size", ctypes.c_int),
        ("switch_addr", ctypes.c_char_p),
        ("job", ctypes.c_char_p),
        ("token", ctypes.c_char_p),
        ("insecure", ctypes.c_int),
        ("credential", ctypes.c_char_p),
        ("listen", ctypes.c_char_p),
        ("mtu", ctypes.c_int),
        ("join_timeout_ms", ctypes.c_int),
        ("timeout_ms", ctypes.c_int),
        ("deterministic", ctypes.c_int),
        ("hierarchy", ctypes.c_int),
        ("host_id", ctypes.c_char_p),
    ]


# ndma_config.hierarchy.
HIERARCHY = {None: 0, "off": 1, "auto": 2}


class Optim(ctypes.Structure):
    """struct ndma_optim."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("algo", ctypes.c_int),
        ("step", ctypes.c_uint32),
        ("lr", ctypes.c_float),
        ("beta1", ctypes.c_float),
        ("beta2", ctypes.c_float),
        ("eps", ctypes.c_float),
        ("weight_decay", ctypes.c_float),
    ]


def _candidates():
    env = os.environ.get("NDMA_LIB")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    # A checkout: python/ndma/ -> build/libndma.so (make libndma).
    yield os.path.join(here, "..", "..", "build", "libndma.so")
    found = ctypes.util.find_library("ndma")
    if found:
        yield found


def load():
    """Returns the loaded library, its functions declared."""
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            tried.append(f"{path}: {e}")
    else:
        raise ImportError(
            "ndma: libndma not found; build it with `make libndma` in the NDMA "
            "checkout or name it in NDMA_LIB (tried: " + "; ".join(tried or ["nothing"]) + ")"
        )
    u64, i, sz, vp = ctypes.c_uint64, ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p
    p64, pi = ctypes.POINTER(u64), ctypes.POINTER(i)
    decl = {
        "ndma_config_init": (None, [ctypes.POINTER(Config)]),
        "ndma_comm_from_env": (i, [p64]),
        "ndma_comm_create": (i, [ctypes.POINTER(Config), p64]),
        "ndma_comm_free": (i, [u64]),
        "ndma_comm_set_algo": (i, [u64, ctypes.c_char_p, ctypes.c_char_p]),
        "ndma_comm_set_deterministic": (i, [u64, i]),
        "ndma_comm_set_timeout": (i, [u64, i]),
        "ndma_comm_rank": (i, [u64, pi]),
        "ndma_comm_size": (i, [u64, pi]),
        "ndma_comm_local_size": (i, [u64, pi]),
        "ndma_allreduce": (i, [u64, vp, vp, sz, i, i]),
        "ndma_iallreduce": (i, [u64, vp, vp, sz, i, i, p64]),
        "ndma_reduce": (i, [u64, vp, vp, sz, i, i, i]),
        "ndma_ireduce": (i, [u64, vp, vp, sz, i, i, i, p64]),
        "ndma_reduce_scatter": (i, [u64, vp, vp, sz, i, i]),
        "ndma_ireduce_scatter": (i, [u64, vp, vp, sz, i, i, p64]),
        "ndma_bcast": (i, [u64, vp, sz, i]),
        "ndma_ibcast": (i, [u64, vp, sz, i, p64]),
        "ndma_allgather": (i, [u64, vp, vp, sz]),
        "ndma_iallgather": (i, [u64, vp, vp, sz, p64]),
        "ndma_gather": (i, [u64, vp, vp, sz, i]),
        "ndma_igather": (i, [u64, vp, vp, sz, i, p64]),
        "ndma_scatter": (i, [u64, vp, vp, sz, i]),
        "ndma_iscatter": (i, [u64, vp, vp, sz, i, p64]),
        "ndma_alltoall": (i, [u64, vp, vp, sz]),
        "ndma_ialltoall": (i, [u64, vp, vp, sz, p64]),
        "ndma_barrier": (i, [u64]),
        "ndma_ibarrier": (i, [u64, p64]),
        "ndma_wait": (i, [u64]),
        "ndma_test": (i, [u64, pi]),
        "ndma_request_notify": (i, [u64, NOTIFY_FN, vp]),
        "ndma_region_alloc": (i, [u64, u64, u64, p64]),
        "ndma_region_free": (i, [u64]),
        "ndma_region_size": (i, [u64, p64]),
        "ndma_region_write": (i, [u64, u64, vp, sz]),
        "ndma_region_read": (i, [u64, u64, vp, sz]),
        "ndma_region_state_stride": (i, [u64, u64, p64]),
        "ndma_optim_init": (None, [ctypes.POINTER(Optim)]),
        "ndma_region_optim_step": (i, [u64, u64, u64, ctypes.POINTER(Optim), vp, sz]),
        "ndma_strerror": (ctypes.c_char_p, [i]),
        "ndma_last_error": (ctypes.c_char_p, []),
        "ndma_abi_version": (i, []),
    }
    for name, (res, args) in decl.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    if lib.ndma_abi_version() != ABI_VERSION:
        raise ImportError(f"ndma: libndma speaks ABI {lib.ndma_abi_version()}, this package {ABI_VERSION}: rebuild one of them")
    return lib
