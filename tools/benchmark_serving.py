"""Throughput and latency of `python -m t2t_lite.serve`, with request batching on and off.

For each setting the tool starts a server on a free local port, warms it up, then
for each concurrency level runs that many client threads, each sending one-sentence
predict requests back to back, and reports requests per second and the 50th and 95th
percentile latency. Example:

    zcat ../shared/data/multi30k/val.en.gz | head -256 > /tmp/sentences.txt
    python tools/benchmark_serving.py --model_dir=EXPORT_DIR/MODEL_NAME \\
        --sentences_file=/tmp/sentences.txt --requests=128

Prints a Markdown table; `--output_json` also writes the numbers.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import threading
import time
from urllib.parse import urlparse


def start_server(model_dir: str, max_batch_size: int, batch_wait_ms: float, threads: int) -> tuple:
    """Starts a server on a free port; returns (process, base URL) once it is ready."""
    process = subprocess.Popen(
        [
            sys.executable, "-m", "t2t_lite.serve", f"--model_dir={model_dir}", "--port=0",
            "--poll_seconds=0", f"--max_batch_size={max_batch_size}",
            f"--batch_wait_ms={batch_wait_ms}", f"--batch_threads={threads}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )  # fmt: skip
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in process.stdout], daemon=True).start()
    # "loading NAME from ...", then "NAME version V AVAILABLE at http://HOST:PORT/v1/models/NAME".
    line = ""
    while " AVAILABLE at http://" not in line:
        try:
            line = lines.get(timeout=600)
        except queue.Empty:
            process.kill()
            raise RuntimeError("the server did not become ready within 10 minutes") from None
        if not line.startswith("loading ") and " AVAILABLE at http://" not in line:
            process.kill()
            raise RuntimeError(f"the server did not start: {line!r}; run it by hand to see why")
    return process, line.split(" at ")[1].strip().split("/v1/models/")[0]


def stop_server(process) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()


def predict(url: str, model: str, sentence: str) -> float:
    """Sends one predict request; returns its latency in seconds."""
    parsed = urlparse(url)
    body = json.dumps({"instances": [sentence]}).encode()
    started = time.perf_counter()
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=300)
    try:
        connection.request("POST", f"/v1/models/{model}:predict", body=body)
        response = connection.getresponse()
        payload = response.read()
    finally:
        connection.close()
    if response.status != 200:
        raise RuntimeError(f"predict failed with {response.status}: {payload[:300]!r}")
    return time.perf_counter() - started


def run_level(url: str, model: str, sentences: list, clients: int, requests: int) -> dict:
    """`requests` requests from `clients` threads; returns rate and latency percentiles."""
    latencies: list = []
    lock = threading.Lock()
    counter = iter(range(requests))

    def client():
        while True:
            with lock:
                index = next(counter, None)
            if index is None:
                return
            latency = predict(url, model, sentences[index % len(sentences)])
            with lock:
                latencies.append(latency)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if len(latencies) != requests:
        raise RuntimeError(f"{requests - len(latencies)} requests failed; see the server's log")
    cuts = statistics.quantiles(latencies, n=20)  # 5% steps: cuts[9] = p50, cuts[18] = p95
    return {
        "clients": clients,
        "requests": requests,
        "requests_per_sec": requests / elapsed,
        "p50_ms": 1000 * cuts[9],
        "p95_ms": 1000 * cuts[18],
    }


def benchmark(args) -> list:
    with open(args.sentences_file, encoding="utf-8") as f:
        sentences = [line.rstrip("\n") for line in f if line.strip()]
    if not sentences:
        raise SystemExit(f"{args.sentences_file} has no sentences")
    model = os.path.basename(os.path.normpath(args.model_dir))
    settings = [("on", args.max_batch_size), ("off", 1)]
    rows = []
    for batching, max_batch_size in settings:
        process, url = start_server(
            args.model_dir, max_batch_size, args.batch_wait_ms, args.batch_threads
        )
        try:
            run_level(url, model, sentences, 4, min(16, args.requests))  # warm-up
            for clients in args.concurrency:
                result = run_level(url, model, sentences, clients, args.requests)
                rows.append(dict(result, batching=batching, max_batch_size=max_batch_size))
                print(f"batching {batching}, {clients:>2} clients: {result}", file=sys.stderr)
        finally:
            stop_server(process)
    return rows


def markdown(rows: list, batch_wait_ms: float, threads: int) -> str:
    lines = [
        "| batching | clients | requests/s | p50 latency (ms) | p95 latency (ms) |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        label = (
            f"on (max {row['max_batch_size']}, wait {batch_wait_ms:g} ms, {threads} thread(s))"
            if row["batching"] == "on"
            else "off"
        )
        lines.append(
            f"| {label} | {row['clients']} | {row['requests_per_sec']:.1f} | "
            f"{row['p50_ms']:.1f} | {row['p95_ms']:.1f} |"
        )
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_dir", required=True, help="EXPORT_DIR/MODEL_NAME")
    parser.add_argument("--sentences_file", required=True, help="one input sentence per line")
    parser.add_argument("--requests", type=int, default=128, help="requests per level")
    parser.add_argument(
        "--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 16]
    )
    parser.add_argument("--max_batch_size", type=int, default=16)
    parser.add_argument("--batch_wait_ms", type=float, default=5.0)
    parser.add_argument("--batch_threads", type=int, default=1)
    parser.add_argument("--output_json", help="also write the rows here")
    args = parser.parse_args(argv)
    rows = benchmark(args)
    print(markdown(rows, args.batch_wait_ms, args.batch_threads))
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
