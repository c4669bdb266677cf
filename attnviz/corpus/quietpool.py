"""The corpus commands' process pool: every process it spawns is one it can stop, whenever the Ctrl-C comes.

A spawn pool (Python 3.11) starts a process inside ``submit`` and records it once ``Process.start`` returned.  A
Ctrl-C raised between the two (in the driver's main thread, by a signal that another of its threads received: the
pool's manager and feeder threads do not block it, quietspawn's mask is the starting thread's alone) left a process
that the pool did not know: one that never got its start-up data printed an ``EOFError`` traceback, one that got it
waited on the pool's queue for ever, and the interpreter's exit joined it for ever (a CI timeout).  Here ``submit``
holds a Ctrl-C until it returns (:func:`held`: a few ms, a spawn's); then :meth:`QuietPool.stop` reaches every
process the pool started.  The caller that was starting the pool stops it (engines.WarmPool.start): the processes
already up ignore SIGINT (quietspawn.settle) and would warm up for seconds while the interrupted command's exit
waited on them (concurrent.futures joins its pools at exit).
"""

from __future__ import annotations

from concurrent.futures import Future, ProcessPoolExecutor

from attnviz.core.interrupts import held  # (moved to core: output files published together hold it too)
from attnviz.corpus import quietspawn

__all__ = ["QuietPool", "held"]


class QuietPool(ProcessPoolExecutor):
    """A spawn pool whose processes are quiet on Ctrl-C (quietspawn) and all stoppable (:meth:`stop`)."""

    def __init__(self, processes: int, initializer, initargs: tuple) -> None:
        super().__init__(processes, mp_context=quietspawn.context(), initializer=initializer, initargs=initargs)

    def submit(self, fn, /, *args, **kwargs) -> Future:
        with held():  # the process it may spawn is recorded before a Ctrl-C surfaces
            return super().submit(fn, *args, **kwargs)

    def stop(self, wait: bool = True) -> None:
        """Terminate every process (SIGTERM: one still reading its start-up data dies silently too) and shut the
        pool down; ``wait``: until its manager thread has joined them."""
        for proc in list((self._processes or {}).values()):  # None once shut down; no public way (Python 3.11)
            proc.terminate()
        # A worker killed while it sent a result over 16 KiB (a header, then the body: two writes) left the
        # manager thread reading the rest for ever, and shutdown(wait) and the interpreter's exit joining it: the
        # result pipe's other writers are the dead workers and this process, which never writes to it.  Its end
        # closed, the read ends at EOF once the workers are gone (a broken pool: stopped anyway).
        writer = getattr(getattr(self, "_result_queue", None), "_writer", None)
        if writer is not None:
            writer.close()
        self.shutdown(wait=wait, cancel_futures=True)
