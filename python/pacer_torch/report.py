"""Progress reports to ``pacer serve`` (the contract in python/README.md).

Rank 0 only, when ``PACER_SERVER`` is set: ``POST {PACER_SERVER}/v1/jobs/{PACER_JOB_ID}/
reports`` with ``Authorization: Bearer {PACER_TOKEN}``, at most once a second, from a
background thread that holds only the latest report (training never waits for the
network; 2 s timeout per request; the first failure is logged once, later ones are
counted).
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Dict, Optional

from . import _native

JOB_ID = re.compile(r"^[a-z0-9-]{1,64}$")
#: Seconds between reports.
INTERVAL_S = 1.0
TIMEOUT_S = 2.0


def _clean(body: Dict[str, object]) -> Dict[str, object]:
    """Numbers finite and >= 0 (the service rejects others): a bad one becomes null
    where the contract allows it, else 0."""
    out: Dict[str, object] = {}
    for k, v in body.items():
        if isinstance(v, float) and not (math.isfinite(v) and v >= 0):
            v = None if k in ("noise_scale", "loss") else 0.0
        out[k] = v
    return out


class Reporter:
    def __init__(self, server: str, job_id: str, token: str):
        self.url = f"{server.rstrip('/')}/v1/jobs/{job_id}/reports"
        self.token = token
        self.failures = 0
        self.sent = 0
        self._last_due = 0.0
        self._pending: Optional[Dict[str, object]] = None
        self._cv = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="pacer-report", daemon=True)
        self._thread.start()

    @staticmethod
    def from_env(rank: int) -> Optional["Reporter"]:
        server = os.environ.get("PACER_SERVER")
        if not server or rank != 0:
            return None
        job_id = os.environ.get("PACER_JOB_ID", "")
        if not JOB_ID.match(job_id):
            raise ValueError(f"environment variable PACER_JOB_ID: {job_id!r} (expected [a-z0-9-]{{1,64}})")
        if not server.startswith(("http://", "https://")):
            raise ValueError(f"environment variable PACER_SERVER: {server!r} (expected an http:// URL)")
        return Reporter(server, job_id, os.environ.get("PACER_TOKEN", ""))

    def due(self, now: float) -> bool:
        if now - self._last_due >= INTERVAL_S:
            self._last_due = now
            return True
        return False

    def send(self, body: Dict[str, object]) -> None:
        with self._cv:
            self._pending = _clean(body)
            self._cv.notify()

    def close(self, wait_s: float = TIMEOUT_S) -> None:
        """Sends what is pending (waiting at most ``wait_s``) and stops the thread."""
        with self._cv:
            self._closed = True
            self._cv.notify()
        self._thread.join(timeout=wait_s)

    def _post(self, body: Dict[str, object]) -> None:
        try:
            # The one report type the service parses (pacer_model::report::JobReport):
            # a malformed report is refused here, naming the field.
            data = _native.report_json(json.dumps(body)).encode()
        except ValueError as e:
            self.failures += 1
            if self.failures == 1:
                print(f"pacer_torch: progress report not sent: {e}", file=sys.stderr)
            return
        req = urllib.request.Request(
            self.url,
            data=data,
            method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.token}"},
        )
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
                resp.read(4096)
            self.sent += 1
        except (urllib.error.URLError, OSError, ValueError) as e:
            self.failures += 1
            if self.failures == 1:
                detail = e.read(512).decode(errors="replace") if isinstance(e, urllib.error.HTTPError) else ""
                print(f"pacer_torch: progress report to {self.url} failed: {e} {detail}".rstrip(),
                      file=sys.stderr)

    def _run(self) -> None:
        while True:
            with self._cv:
                while self._pending is None and not self._closed:
                    self._cv.wait(timeout=1.0)
                body, self._pending = self._pending, None
                closed = self._closed
            if body is not None:
                self._post(body)
            if closed and body is None:
                return
            if closed:
                continue
            time.sleep(0)  # let the trainer run
