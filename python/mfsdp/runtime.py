"""The step runtime for Python: launchers, compiling a graph, opening a library.

`Library` and `Step` are the C ABI of include/mfsdp/runtime.h (mfsdp._C); this
module adds how a Python process learns its ranks (mpirun, torchrun, or one
process alone) and how a graph becomes a step library (mfsdp-compile).
"""

import atexit
import gc
import os
import subprocess

from . import Error, _C
from ._paths import tool

Library = _C.Library
Step = _C.Step

_BACKENDS = {"host": _C.BACKEND_HOST, "cpu": _C.BACKEND_HOST, "cuda": _C.BACKEND_CUDA}


def launcher():
    """How this process was started: 'mpirun', 'torchrun' or 'single'."""
    env = os.environ
    if "OMPI_COMM_WORLD_SIZE" in env or "PMI_SIZE" in env or "PMIX_RANK" in env:
        return "mpirun"
    if "RANK" in env and "WORLD_SIZE" in env:
        return "torchrun"
    return "single"


_mpi_started = False


def ranks(launch=None):
    """(rank, world size) of this process, starting MPI when the launcher is mpirun
    or the process runs alone (MPI's singleton: a world of one)."""
    global _mpi_started
    launch = launch or launcher()
    if launch == "torchrun":
        try:
            return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        except ValueError as e:
            raise Error(f"the torchrun variables RANK and WORLD_SIZE must be integers: {e}")
    rank, size = _C.mpi_init()
    if not _mpi_started:
        _mpi_started = True
        atexit.register(_finalize)
    return rank, size


_open_steps = []  # in the order they were opened, the same on every rank
_unused_steps = []  # steps whose model was collected: closed at the next close_unused()


def release_when_collected(owner, step):
    """Closes `step` once `owner` (its model) is garbage: not from the garbage
    collector itself, which runs at different moments on different ranks while
    closing is collective (the ranks agree on it), but at the next point every
    rank reaches together: the next open_step, close_unused() or exit."""
    import weakref

    weakref.finalize(owner, _unused_steps.append, step)


def close_unused():
    """Closes the steps whose models are gone (collective: every rank calls it at
    the same point of the program). A full collection first, so that every rank
    has found the same models unreachable; then the steps in the order they were
    opened."""
    gc.collect()
    if not _unused_steps:
        return
    unused = {id(s) for s in _unused_steps}
    _unused_steps.clear()
    for s in [s for s in _open_steps if id(s) in unused]:
        _open_steps.remove(s)
        s.close()


def _finalize():
    # Every runtime is destroyed before MPI is finalised, in the order opened.
    _unused_steps.clear()
    for s in list(_open_steps):
        s.close()
    _open_steps.clear()
    _C.mpi_finalize()


def open_step(library, backend="host", launch=None, timeout_ms=0, collective_timeout_s=None):
    """Creates the runtime on a step library (collective: every rank calls it).

    collective_timeout_s: the watchdog (mfsdp_config.collective_timeout_ms): a
    collective that does not complete within this many seconds fails the call
    with an error naming it and the ranks that did not arrive; None: 10 minutes.
    """
    if collective_timeout_s is None:
        collective_ms = 0
    else:
        if not (isinstance(collective_timeout_s, (int, float)) and 0 < collective_timeout_s <= 1e6):
            raise Error("collective_timeout_s: expected seconds > 0, got "
                        f"{collective_timeout_s!r}")
        collective_ms = max(1, int(round(collective_timeout_s * 1000)))
    # Runtimes whose models are gone are closed first, at this point every
    # rank reaches (the creation below is collective too).
    close_unused()
    if isinstance(library, (str, os.PathLike)):
        library = Library(os.fspath(library))
    if backend not in _BACKENDS:
        raise Error(f"backend: expected one of {', '.join(_BACKENDS)}, got {backend!r}")
    launch = launch or launcher()
    if launch == "torchrun":
        bootstrap = _C.BOOTSTRAP_TORCHRUN
        _agree_on_port()
    else:
        ranks(launch)
        bootstrap = _C.BOOTSTRAP_MPI
    step = Step(library, backend=_BACKENDS[backend], bootstrap=bootstrap, timeout_ms=timeout_ms,
                collective_timeout_ms=collective_ms)
    _open_steps.append(step)
    return step


_stores = []  # torch stores this process keeps open (rank 0's may serve the others)


def _agree_on_port():
    """Under torchrun, MASTER_PORT is taken by torch's own store: the ranks agree on
    a free port for mfsdp's control plane through that store (MFSDP_MASTER_PORT,
    unless the user set it)."""
    if os.environ.get("MFSDP_MASTER_PORT"):
        return
    import socket
    from datetime import timedelta
    import torch.distributed as dist
    rank, world = ranks("torchrun")
    try:
        addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    except (KeyError, ValueError) as e:
        raise Error(f"torchrun: MASTER_ADDR and MASTER_PORT must be set ({e})")
    # torchrun's agent keeps a store on MASTER_PORT for its workers; without
    # one (a launcher that only sets the variables), rank 0 serves it.
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    try:
        store = dist.TCPStore(addr, port, world, is_master=(rank == 0 and not agent),
                              timeout=timedelta(minutes=5), wait_for_workers=False)
    except Exception as e:  # noqa: BLE001
        raise Error(f"torchrun: cannot reach the store at {addr}:{port} to agree on a port "
                    f"for mfsdp ({e}); set MFSDP_MASTER_PORT to a free port on rank 0's host")
    _stores.append(store)
    key = f"mfsdp/master_port/{len(_stores)}"
    if rank == 0:
        with socket.socket() as sock:
            sock.bind(("", 0))
            free = sock.getsockname()[1]
        store.set(key, str(free))
    os.environ["MFSDP_MASTER_PORT"] = store.get(key).decode()


def compile_graph(graph_path, out_path, *, mesh, policy, zero=None, prefetch=False,
                  accumulate=False, bucket_mb=None, layouts=None, extra_args=()):
    """Runs mfsdp-compile on a graph file; raises Error with the compiler's message."""
    args = [tool("mfsdp-compile"), os.fspath(graph_path), f"--mesh={mesh}", f"--policy={policy}",
            "-o", os.fspath(out_path)]
    if zero is not None:
        args.append(f"--zero={zero}")
    if prefetch:
        args.append("--prefetch")
    if accumulate:
        args.append("--accumulate")
    if bucket_mb is not None:
        args.append(f"--bucket-mb={bucket_mb}")
    if layouts:
        args.append(f"--layouts={layouts}")
    args += list(extra_args)
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise Error("mfsdp-compile failed:\n  " + " ".join(args) + "\n" + r.stdout.strip())
    return out_path
