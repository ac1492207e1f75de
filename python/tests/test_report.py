"""Progress reports to a `pacer serve` stand-in on 127.0.0.1 (the shared contract)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

import pacer_torch as pacer
from pacer_torch import job as jobmod

FIELDS = {"step", "samples", "time_s", "replicas", "device_type", "global_batch", "local_batches",
          "throughput", "step_time_s", "noise_scale", "loss", "done"}


def serve(status):
    got = []

    class H(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append((self.path, self.headers["Authorization"], json.loads(body)))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"accepted": true}' if status == 202 else b'{"error": "no", "field": "step"}')

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, got


def train(monkeypatch, url, tmp_path):
    monkeypatch.setenv("PACER_SERVER", url)
    monkeypatch.setenv("PACER_JOB_ID", "job-7")
    monkeypatch.setenv("PACER_TOKEN", "secret")
    monkeypatch.setenv("PACER_CHECKPOINT_DIR", str(tmp_path))
    jobmod.set_current(None)
    data = torch.utils.data.TensorDataset(torch.randn(48, 4), torch.randint(0, 2, (48,)))
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    net = pacer.DataParallel(model, opt)
    loader = pacer.DataLoader(data, global_batch=16)
    for _ in pacer.remaining_epochs(1):
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            pacer.current().stats.loss = loss.item()
    jobmod.set_current(None)
    return pacer


def test_reports_follow_the_contract(monkeypatch, tmp_path):
    srv, got = serve(202)
    try:
        train(monkeypatch, f"http://127.0.0.1:{srv.server_address[1]}", tmp_path)
    finally:
        srv.shutdown()
    assert got, "no report arrived"
    path, auth, last = got[-1]
    assert path == "/v1/jobs/job-7/reports" and auth == "Bearer secret"
    assert set(last) == FIELDS
    assert last["done"] is True and last["step"] == 3 and last["samples"] == 48
    assert last["replicas"] == 1 and last["global_batch"] == 16 and last["local_batches"] == [16]
    assert all(v is None or v is True or v is False or isinstance(v, (str, list)) or v >= 0
               for v in last.values())


def test_a_refusing_or_absent_server_never_stops_training(monkeypatch, tmp_path, capfd):
    srv, got = serve(400)
    try:
        train(monkeypatch, f"http://127.0.0.1:{srv.server_address[1]}", tmp_path)
    finally:
        srv.shutdown()
    assert got
    err = capfd.readouterr().err
    assert err.count("progress report") == 1, err
    # Nobody listening: the same.
    train(monkeypatch, "http://127.0.0.1:9", tmp_path / "b")


def test_reports_are_checked_against_the_service_s_report_type():
    from pacer_torch import _native

    body = {"step": 3, "samples": 48, "time_s": 1.5, "replicas": 2, "device_type": "t4+a100",
            "throughput": 32.0}
    back = json.loads(_native.report_json(json.dumps(body)))
    assert back["device_type"] == "t4+a100" and back["done"] is False and back["local_batches"] == []
    for spoil, field in (({"stepz": 1}, "unknown field `stepz`"),
                         ({"device_type": "t4 a100"}, "device_type"),
                         ({"replicas": 0}, "replicas"),
                         ({"time_s": -1.0}, "time_s")):
        try:
            _native.report_json(json.dumps({**body, **spoil}))
        except ValueError as e:
            assert field in str(e), e
        else:
            raise AssertionError(f"{spoil} was accepted")
