#!/usr/bin/env python3
"""SIGTERM drains `tessera serve` (#19): the real binary on stories260K, streams in flight.

    serve_sigterm.py --tessera BIN --shared-data DIR

With a long grace the streams in flight run to their end; with none they are cancelled. Either
way every client gets a well-formed end (a finish_reason, data: [DONE], the chunked terminator)
and the process exits 0 within a bound. Prints the figures docs/reliability.md quotes.
"""
import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
from cli_tests import check, fail  # noqa: E402

STREAMS = 8
MAX_TOKENS = 400  # with ignore_eos: about a second of decoding for the batch, on one thread


class Serve:
    """`tessera serve` on a free port; its stderr collected on a thread."""

    def __init__(self, args, grace):
        data = args.shared_data
        self.proc = subprocess.Popen(
            [args.tessera, "serve", "--model", os.path.join(data, "stories260K.bin"),
             "--tokenizer", os.path.join(data, "stories260K_idtok.bin"), "--port", "0",
             "--threads", "1", "--shutdown-grace", str(grace)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.port = None
        ready = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.lines.append(line)
                m = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    ready.set()
            ready.set()

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        ready.wait(60)
        check(self.port is not None, "serve did not start:\n" + "".join(self.lines))

    def stderr(self):
        return "".join(self.lines)


class Stream(threading.Thread):
    """One streamed completion, read event by event."""

    def __init__(self, port, i):
        super().__init__(daemon=True)
        self.port, self.i = port, i
        self.started = threading.Event()
        self.tokens, self.finish_reason, self.done, self.error = 0, None, False, None

    def run(self):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            body = {"prompt": [1, 10 + self.i], "max_tokens": MAX_TOKENS, "temperature": 0,
                    "ignore_eos": True, "stream": True}
            conn.request("POST", "/v1/completions", json.dumps(body),
                         {"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                self.error = f"status {resp.status}: {resp.read()!r}"
                return
            # http.client decodes the chunks and raises IncompleteRead on a cut stream.
            for raw in iter(resp.readline, b""):
                line = raw.decode().strip()
                if not line:
                    continue
                if not line.startswith("data: "):
                    self.error = f"not an event: {line!r}"
                    return
                if line == "data: [DONE]":
                    self.done = True
                    continue
                event = json.loads(line[6:])
                for choice in event["choices"]:
                    self.tokens += len(choice["token_ids"])
                    if choice["finish_reason"] is not None:
                        self.finish_reason = choice["finish_reason"]
                self.started.set()
        except Exception as e:  # noqa: BLE001 - any failure is the test's finding
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self.started.set()


def refused_while_draining(port):
    """During the drain /health answers 503 and so does a new completion (or, once the last
    stream has ended, the port is closed). Returns whether the 503s were seen."""
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/health")
            if conn.getresponse().status != 503:
                time.sleep(0.005)
                continue
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("POST", "/v1/completions", json.dumps({"prompt": "Once"}),
                         {"Content-Type": "application/json"})
            resp = conn.getresponse()
            check(resp.status == 503 and b"shutting down" in resp.read(),
                  f"a completion during the drain got {resp.status}")
            return True
        except ConnectionError:
            return False


def drain(args, grace, expect):
    """Streams in flight, then SIGTERM; returns (seconds to exit, finish reasons)."""
    serve = Serve(args, grace)
    streams = [Stream(serve.port, i) for i in range(STREAMS)]
    for s in streams:
        s.start()
    for s in streams:
        s.started.wait(60)
    t0 = time.monotonic()
    serve.proc.send_signal(signal.SIGTERM)
    refused = refused_while_draining(serve.port) if grace > 0 else None
    try:
        rc = serve.proc.wait(timeout=grace + 30)
    except subprocess.TimeoutExpired:
        serve.proc.kill()
        fail(f"serve (grace {grace}) did not exit within {grace + 30} s of SIGTERM:\n"
             + serve.stderr())
    seconds = time.monotonic() - t0
    for s in streams:
        s.join(30)
    serve.reader.join(10)
    check(rc == 0, f"serve exited {rc} after SIGTERM:\n{serve.stderr()}")
    check("serve: stopped in" in serve.stderr(), serve.stderr())
    reasons = []
    for s in streams:
        check(s.error is None, f"stream {s.i} (grace {grace}): {s.error}")
        check(s.done, f"stream {s.i} (grace {grace}) ended without data: [DONE]")
        check(s.finish_reason in expect,
              f"stream {s.i} (grace {grace}): finish_reason {s.finish_reason}, want {expect}")
        if s.finish_reason == "length":
            check(s.tokens == MAX_TOKENS, f"stream {s.i}: {s.tokens} tokens, want {MAX_TOKENS}")
        reasons.append(s.finish_reason)
    summary = [line.strip() for line in serve.lines if "serve: stopped" in line]
    print(f"grace {grace} s: SIGTERM with {STREAMS} streams in flight, exit 0 after "
          f"{seconds:.2f} s, finish reasons {sorted(reasons)}; {summary[0]}"
          + ("; a new request during the drain got 503" if refused else ""))
    return seconds, reasons, refused


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tessera", required=True)
    parser.add_argument("--shared-data", required=True)
    args = parser.parse_args()
    # A long grace: every stream runs to its length.
    _, _, refused = drain(args, 60, {"length"})
    check(refused, "the drain ended before /health answered 503")
    # No grace: the streams still running are cancelled, each with a well-formed end.
    _, reasons, _ = drain(args, 0, {"length", "abort"})
    check("abort" in reasons, f"no stream was cancelled with --shutdown-grace 0: {reasons}")
    print("ok")


if __name__ == "__main__":
    main()
