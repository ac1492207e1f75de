"""``python -m pacer_torch.run``: torchrun with a clean stop on preemption.

The same arguments as ``torchrun`` (``torch.distributed.run``), the same launch. The
difference is how a stop ends. Told to stop (SIGTERM, SIGINT, SIGHUP or SIGQUIT: the
signals torchrun handles), torchrun's elastic agent sends that signal on to its workers,
waits for them up to ``--shutdown-timeout`` seconds (30 by default) and then raises
``SignalException`` out of its ``main``: a traceback and exit status 1, which an
orchestrator reads as a crash. pacer_torch's workers use that time to finish the step,
write the checkpoint and exit with 143 (``job.STOP_EXIT_STATUS``); this launcher then
ends the same way, with one line on stderr and status ``128 + signal`` (143 for
SIGTERM), the shell's convention for "ended by that signal", so a scheduler knows the job
stopped before its end and can be resumed from its checkpoint.

Workers that stop without torchrun being signalled (``pacer_torch.request_stop()``, or a
SIGTERM sent to the workers alone) all exit 143 too; torchrun reports that as failed
workers (``ChildFailedError``, another traceback), and this launcher as status 143 with
one line, when every failed worker exited 143. Any other failure is torchrun's, unchanged.
"""

from __future__ import annotations

import signal
import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun_main

    from .job import STOP_EXIT_STATUS

    try:
        torchrun_main(argv)
    except ChildFailedError as e:
        codes = sorted({f.exitcode for f in e.failures.values()})
        if codes != [STOP_EXIT_STATUS]:
            raise
        print(
            f"pacer_torch.run: the workers stopped with status {STOP_EXIT_STATUS} (checkpoint "
            "written, resumable)",
            file=sys.stderr,
            flush=True,
        )
        return STOP_EXIT_STATUS
    except SignalException as e:
        sig = signal.Signals(e.sigval)
        print(
            f"pacer_torch.run: stopped by {sig.name}; the workers were sent {sig.name} and "
            "given --shutdown-timeout seconds to checkpoint and exit",
            file=sys.stderr,
            flush=True,
        )
        return 128 + int(sig)
    return 0


if __name__ == "__main__":
    sys.exit(main())
