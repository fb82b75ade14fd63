"""A peer on the same server: pytest-latency vs NVIDIA AIPerf, measuring the simulator (and the
llama.cpp server that scripts/llama_server.py builds, with ``--server llama``).

The simulator runs in its own process (``pytest-latency sim``, preset ``instant``: 1 ms headers,
200 µs per prompt token, ``--itl-ms`` per output token, 32 output tokens, no jitter, so the true
value of every metric is known and constant). Both tools send the same streamed chat request
(the same ~218-token prompt, ``max_tokens`` 32, ``stream_options.include_usage``), one request at a
time, 1 warm-up + ``--requests`` measured, and they take turns (``--rounds`` rounds of
pytest-latency then AIPerf) so drift hits both:

* pytest-latency: a real pytest run (``python -m pytest --latency-json=...``) of one test marked
  ``@pytest.mark.latency(samples=N, warmup=1)`` that streams through an instrumented
  ``openai.OpenAI``; the percentiles are read from the result file.
  ttfb is its ``ttfb`` (request handed to the transport → response headers).
* AIPerf (``aiperf profile``, installed from PyPI in its own venv, ``--peer-venv``, default
  /work/peer-venv; never a dependency of this project) with the command line that works offline on
  this box (see the research notes): ``--request-rate 50 --arrival-pattern constant`` (paced:
  without it AIPerf's timing manager busy-polls a core), ``--use-server-token-count``, and a local
  tokenizer directory built here (a one-word WordLevel tokenizer: AIPerf needs one to load, the
  token counts come from the server's usage). Its ttft is ``time_to_first_token``, tpot its
  ``inter_token_latency``, itl its ``inter_chunk_latency``, e2e its ``request_latency``, and ttfb
  ``http_req_sending + http_req_waiting`` per request from ``profile_export.jsonl``.

Both are compared with the server's ground truth of their own run (``GET /_sim/truth``):
ttfb truth = request received → headers sent, ttft truth = request received → first content
event sent (so a tool's ttft − truth is its send path + loopback + read path), tpot truth =
(last − first content event) / (tokens − 1), itl truth = the gaps between content events.
Percentiles are linear (numpy's default) everywhere.

``--server llama`` measures a real inference server instead: ``llama-server`` (built by
``python scripts/llama_server.py build``, serving its tiny random-weight model, one slot, one
thread). Every request asks for exactly 32 tokens and no prompt cache (``ignore_eos``,
``cache_prompt: false``, sent by both tools), so each one prefills the whole prompt. The server
keeps no per-event log, so there is no ground truth: the two tools are compared with each other,
and with the server's own mean prefill and decode times (its Prometheus ``/metrics`` counters,
read before and after each tool's run).

    python benchmarks/bench_peer.py                   # 2 rounds of 50 requests each, ~2 min
    python benchmarks/bench_peer.py --quick           # 1 round of 20
    python benchmarks/bench_peer.py --server llama    # the llama.cpp server, ~3 min
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx2
from _common import load, spawn_sim

from pytest_latency.sim import TruthRecord
from pytest_latency.stats import percentile

ROOT = Path(__file__).resolve().parents[1]
COMMAND = "python benchmarks/bench_peer.py"
PROMPT = "Please summarise the following text in one paragraph. " * 16
TOKENS = 32
PCTS = (50.0, 90.0, 99.0)
METRICS = ("ttfb", "ttft", "tpot", "itl", "e2e")

TEST_FILE = textwrap.dedent(
    """
    import os

    import openai
    import pytest

    from pytest_latency import instrument

    CLIENT = instrument(openai.OpenAI(base_url=os.environ["SIM_OPENAI_URL"], api_key="k",
                                      max_retries=0))


    @pytest.mark.latency(samples=int(os.environ["SIM_REQUESTS"]), warmup=1)
    def test_peer():
        stream = CLIENT.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": os.environ["SIM_PROMPT"]}],
            max_tokens=int(os.environ["SIM_TOKENS"]),
            stream=True,
            stream_options={"include_usage": True},
            extra_body=json.loads(os.environ["SIM_EXTRA"]),
        )
        for _ in stream:
            pass
    """
)
TEST_FILE = TEST_FILE.replace("import os\n", "import json\nimport os\n", 1)
# llama-server: exactly TOKENS tokens from the random model, and a full prefill every time.
LLAMA_EXTRA = {"ignore_eos": True, "cache_prompt": False}

TOKENIZER_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from tokenizers import Tokenizer, models, pre_tokenizers
    tok = Tokenizer(models.WordLevel(vocab={"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(sys.argv[1] + "/tokenizer.json")
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]",
              "model_max_length": 1000000}
    json.dump(config, open(sys.argv[1] + "/tokenizer_config.json", "w"))
    """
)


def start_sim(args: argparse.Namespace) -> tuple[subprocess.Popen[str], str]:
    cmd = [
        sys.executable, "-m", "pytest_latency.cli", "sim", "--port", "0", "--preset", "instant",
        "--ttfb-ms", "1", "--prefill-us-per-token", "200", "--decode-ms-per-token",
        str(args.itl_ms), "--output-tokens", str(TOKENS), "--jitter", "0",
    ]  # fmt: skip
    return spawn_sim(cmd)


def truth_of_run(http: httpx2.Client) -> dict[str, list[float]]:
    """Server truth (ms) of the measured requests since the last clear (the first is warm-up)."""
    records = [TruthRecord.from_json(r) for r in http.get("/_sim/truth").json()["records"]]
    http.delete("/_sim/truth")
    records.sort(key=lambda r: r.t_received_ns)
    out: dict[str, list[float]] = {"ttfb": [], "ttft": [], "tpot": [], "itl": [], "e2e": []}
    for r in records[1:]:
        content = r.content_events
        assert r.ttft_ns is not None and r.e2e_ns is not None and r.output_tokens
        assert r.ttfb_ns is not None
        out["ttfb"].append(r.ttfb_ns / 1e6)
        out["ttft"].append(r.ttft_ns / 1e6)
        out["e2e"].append(r.e2e_ns / 1e6)
        out["tpot"].append((content[-1].t_sent_ns - content[0].t_sent_ns) / 1e6 / (TOKENS - 1))
        out["itl"] += [g / 1e6 for g in r.itl_ns]
    return out


def start_llama() -> tuple[Any, str]:
    """llama-server on loopback (scripts/llama_server.py); exits with how to build it if absent."""
    spec = importlib.util.spec_from_file_location(
        "llama_server", ROOT / "scripts" / "llama_server.py"
    )
    assert spec is not None and spec.loader is not None
    llama_server = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = llama_server  # its dataclasses look their module up there
    spec.loader.exec_module(llama_server)
    reason = llama_server.unavailable_reason()
    if reason is not None:
        raise SystemExit(reason)
    server = llama_server.start(extra_args=["--metrics"])
    return server, server.base_url


def server_seconds(http: httpx2.Client) -> dict[str, float]:
    """llama-server's cumulative prefill and decode counters (its Prometheus /metrics)."""
    wanted = {
        "llamacpp:prompt_seconds_total": "prompt_s",
        "llamacpp:tokens_predicted_seconds_total": "decode_s",
        "llamacpp:prompt_tokens_total": "prompt_tokens",
        "llamacpp:tokens_predicted_total": "decoded_tokens",
    }
    out: dict[str, float] = {}
    for line in http.get("/metrics").text.splitlines():
        name, _, value = line.partition(" ")
        if name in wanted:
            out[wanted[name]] = float(value)
    return out


def timed(
    cmd: list[str], cwd: Path, env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """Run a tool: its result, wall seconds, and CPU seconds of it and all its processes."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return done, wall, cpu


def run_pytest_latency(
    work: Path, base: str, requests: int, extra: dict[str, Any]
) -> tuple[dict[str, Any], float, float]:
    out = work / "latency.json"
    env = {
        **os.environ,
        "SIM_OPENAI_URL": f"{base}/v1",
        "SIM_REQUESTS": str(requests),
        "SIM_TOKENS": str(TOKENS),
        "SIM_PROMPT": PROMPT,
        "SIM_EXTRA": json.dumps(extra),
    }
    cmd = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
        f"--latency-json={out}", "test_peer.py",
    ]  # fmt: skip
    done, wall, cpu = timed(cmd, work, env)
    if done.returncode != 0:
        raise SystemExit(f"pytest failed:\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    metrics = json.loads(out.read_text())["tests"][0]["metrics"]
    # µs in the result file; ms here. Keys as in AIPerf's export for one table.
    return (
        {
            name: {f"p{p:g}": metrics[name][f"p{p:g}"] / 1000 for p in PCTS}
            | {"count": metrics[name]["count"], "mean": metrics[name]["mean"] / 1000}
            for name in METRICS
        },
        wall,
        cpu,
    )


def run_aiperf(
    work: Path, base: str, requests: int, venv: Path, index: int, extra: dict[str, Any]
) -> tuple[dict[str, Any], float, float, str]:
    artifacts = work / f"aiperf-{index}"
    cmd = [
        str(venv / "bin" / "aiperf"), "profile", "--model", "m", "--url", base,
        "--endpoint-type", "chat", "--streaming", "--input-file", str(work / "aiperf.jsonl"),
        "--custom-dataset-type", "single_turn", "--request-count", str(requests),
        "--warmup-request-count", "1", "--concurrency", "1", "--request-rate", "50",
        "--arrival-pattern", "constant", "--tokenizer", str(work / "tokenizer"),
        "--use-server-token-count", "--use-legacy-max-tokens", "--no-server-metrics",
        "--no-gpu-telemetry", "--ui-type", "none", "--artifact-dir", str(artifacts),
    ]  # fmt: skip
    if extra:
        cmd += ["--extra-inputs", json.dumps(extra)]
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}  # see peers-offline.md
    done, wall, cpu = timed(cmd, work, env)
    export = artifacts / "profile_export_aiperf.json"
    if done.returncode != 0 or not export.exists():
        raise SystemExit(f"aiperf failed ({done.returncode}):\n{done.stdout[-3000:]}")
    data = json.loads(export.read_text())
    names = {
        "ttft": "time_to_first_token",
        "tpot": "inter_token_latency",
        "itl": "inter_chunk_latency",
        "e2e": "request_latency",
    }
    short = " ".join(
        a if a.startswith("-") or " " not in a else repr(a)
        for a in ["aiperf", *cmd[1:]]  # for the docs
    ).replace(str(work), "WORK")
    out = {
        ours: {f"p{p:g}": data[theirs][f"p{p:g}"] for p in PCTS}
        | {"count": data[theirs]["count"], "mean": data[theirs]["avg"]}
        for ours, theirs in names.items()
    }
    # AIPerf has no single ttfb: its k6-style phases sending + waiting end at the response headers.
    ttfb = []
    for line in (artifacts / "profile_export.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["metadata"].get("benchmark_phase") == "warmup":
            continue
        m = record["metrics"]
        ttfb.append(m["http_req_sending"]["value"] + m["http_req_waiting"]["value"])
    out["ttfb"] = pct_block(ttfb)
    return out, wall, cpu, short


def decompose(http: httpx2.Client, base: str, requests: int) -> dict[str, list[float]]:
    """pytest-latency's ttft − truth split into its parts, from the same calls made in this
    process (the capture's stamps and the server's are on one clock, CLOCK_MONOTONIC): send path =
    server received − request handed to the transport; read lag = first (last) content chunk
    stamped by the capture − that event sent by the server."""
    import openai

    from pytest_latency import instrument
    from pytest_latency.metrics import call_metrics
    from pytest_latency.wire import WireRecord

    records: list[WireRecord] = []
    client = instrument(
        openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0), sink=records.append
    )
    http.delete("/_sim/truth")
    with client:
        for _ in range(requests + 1):
            for _ in client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": PROMPT}],
                max_tokens=TOKENS,
                stream=True,
                stream_options={"include_usage": True},
            ):
                pass
    truths = sorted(
        (TruthRecord.from_json(r) for r in http.get("/_sim/truth").json()["records"]),
        key=lambda r: r.t_received_ns,
    )
    http.delete("/_sim/truth")
    out: dict[str, list[float]] = {"send path": [], "first read lag": [], "last read lag": []}
    for record, truth in list(zip(records, truths, strict=True))[1:]:
        m = call_metrics(record)
        assert m.ttft is not None and m.e2e is not None
        content = truth.content_events
        out["send path"].append((truth.t_received_ns - record.t_start_ns) / 1e6)
        first = record.t_start_ns + m.ttft * 1000
        last = record.t_start_ns + m.e2e * 1000
        out["first read lag"].append((first - content[0].t_sent_ns) / 1e6)
        out["last read lag"].append((last - content[-1].t_sent_ns) / 1e6)
    return out


def signed(value: float, width: int) -> str:
    """A signed difference, or a dash where there is no truth to differ from (NaN)."""
    return f"{value:+{width}.3f}" if value == value else f"{'—':>{width}}"


def pct_block(values: list[float]) -> dict[str, float]:
    return {f"p{p:g}": percentile(values, p) for p in PCTS} | {
        "count": len(values),
        "mean": sum(values) / len(values),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=50, help="measured requests per tool run")
    ap.add_argument("--rounds", type=int, default=2, help="pytest-latency/AIPerf turns")
    ap.add_argument("--itl-ms", type=float, default=10.0, help="decode time per token")
    ap.add_argument("--peer-venv", type=Path, default=Path("/work/peer-venv"))
    ap.add_argument("--quick", action="store_true", help="1 round of 20 requests")
    ap.add_argument(
        "--server", choices=("sim", "llama"), default="sim", help="the simulator or llama-server"
    )
    args = ap.parse_args()
    llama = args.server == "llama"
    if args.quick:
        args.requests, args.rounds = 20, 1
    argv = " ".join(sys.argv[1:])
    print(f"command: {COMMAND}{' ' + argv if argv else ''}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}  cores: {os.cpu_count()}")
    aiperf = args.peer_venv / "bin" / "aiperf"
    if not aiperf.exists():
        raise SystemExit(
            f"{aiperf} not found. Install the peer in its own venv (not a project dependency):\n"
            f"  python3 -m venv {args.peer_venv} && {args.peer_venv}/bin/pip install aiperf"
        )
    version = (
        subprocess.run(
            [str(args.peer_venv / "bin" / "pip"), "show", "aiperf"], capture_output=True, text=True
        )
        .stdout.split("Version: ")[1]
        .split()[0]
    )
    print(f"peer: AIPerf {version} from {args.peer_venv}")
    if llama:
        server, base = start_llama()
        stop = server.stop
        print(f"server: llama-server {base} (tiny random-weight model; {LLAMA_EXTRA})")
    else:
        proc, base = start_sim(args)
        stop = proc.terminate
    extra = LLAMA_EXTRA if llama else {}
    results: list[tuple[str, int, dict[str, Any], dict[str, Any], float]] = []
    # Per tool run: its CPU seconds (all its processes) and, on llama-server, the server's own
    # mean prefill per request and decode per token during that run.
    run_costs: list[str] = []
    aiperf_cmd = ""

    def finish_run(
        tool: str, i: int, measured: dict[str, Any], wall: float, cpu: float,
        before: dict[str, float],
    ) -> None:  # fmt: skip
        truth: dict[str, list[float]] = {}
        line = f"  {tool:15} round {i + 1}: client CPU {cpu:.2f} s in {wall:.1f} s wall"
        if llama:
            after = server_seconds(http)
            requests = args.requests + 1  # the server counts the warm-up request too
            prefill = (after["prompt_s"] - before["prompt_s"]) * 1000 / requests
            decoded = after["decoded_tokens"] - before["decoded_tokens"]
            decode = (after["decode_s"] - before["decode_s"]) * 1000 / decoded
            line += (
                f"; server prefill {prefill:.3f} ms/request, decode {decode:.3f} ms/token; "
                f"tool mean ttft − prefill {measured['ttft']['mean'] - prefill:+.3f} ms, "
                f"mean tpot − decode {measured['tpot']['mean'] - decode:+.3f} ms"
            )
        else:
            truth = truth_of_run(http)
        run_costs.append(line)
        results.append((tool, i, measured, truth, wall))
        print(f"round {i + 1}: {tool} done in {wall:.1f} s (load {load()})")

    try:
        with (
            tempfile.TemporaryDirectory(prefix="latency-peer-") as tmp,
            httpx2.Client(base_url=base, timeout=60) as http,
        ):
            work = Path(tmp)
            (work / "test_peer.py").write_text(TEST_FILE)
            (work / "pytest.ini").write_text("[pytest]\n")
            (work / "tokenizer").mkdir()
            subprocess.run(
                [str(args.peer_venv / "bin" / "python"), "-c", TOKENIZER_SCRIPT,
                 str(work / "tokenizer")],
                check=True,
            )  # fmt: skip
            line = {"text": PROMPT, "output_length": TOKENS}
            (work / "aiperf.jsonl").write_text(json.dumps(line) + "\n")
            if not llama:
                http.delete("/_sim/truth")
            for i in range(args.rounds):
                before = server_seconds(http) if llama else {}
                measured, wall, cpu = run_pytest_latency(work, base, args.requests, extra)
                finish_run("pytest-latency", i, measured, wall, cpu, before)
                before = server_seconds(http) if llama else {}
                measured, wall, cpu, aiperf_cmd = run_aiperf(
                    work, base, args.requests, args.peer_venv, i, extra
                )
                finish_run("AIPerf", i, measured, wall, cpu, before)
            parts = {} if llama else decompose(http, base, args.requests)
    finally:
        stop()

    print(f"\nAIPerf command (WORK = the temp dir): {aiperf_cmd}")
    print(f"\nms; p50 / p90 / p99; truth = the server's own record of that run; load {load()}")
    print(f"{'metric':5} {'tool':15} {'rnd':>3} {'n':>5} {'tool p50/p90/p99':>26} "
          f"{'truth p50/p90/p99':>26} {'tool − truth p50':>17}")  # fmt: skip
    p50s: dict[tuple[str, str], list[float]] = {}
    offsets: dict[tuple[str, str], list[float]] = {}
    for metric in METRICS:
        for tool, i, measured, truth, _ in results:
            m = measured[metric]
            cells_m = "/".join(f"{m[f'p{p:g}']:.2f}" for p in PCTS)
            cells_t, off = "(no truth)", float("nan")  # llama-server logs no per-event times
            if truth:
                t = pct_block(truth[metric])
                cells_t = "/".join(f"{t[f'p{p:g}']:.2f}" for p in PCTS)
                off = m["p50"] - t["p50"]
            p50s.setdefault((metric, tool), []).append(m["p50"])
            offsets.setdefault((metric, tool), []).append(off)
            print(f"{metric:5} {tool:15} {i + 1:3} {m['count']:5} {cells_m:>26} {cells_t:>26} "
                  f"{signed(off, 17)}")  # fmt: skip
    print("\nside by side (mean over rounds of each p50):")
    print(f"{'metric':5} {'pytest-latency':>15} {'AIPerf':>10} {'AIPerf/ours':>12} "
          f"{'ours − truth':>13} {'AIPerf − truth':>15}")  # fmt: skip
    for metric in METRICS:
        ours = sum(p50s[(metric, "pytest-latency")]) / args.rounds
        theirs = sum(p50s[(metric, "AIPerf")]) / args.rounds
        o_off = sum(offsets[(metric, "pytest-latency")]) / args.rounds
        a_off = sum(offsets[(metric, "AIPerf")]) / args.rounds
        flag = "  > 2 %" if abs(theirs / ours - 1) > 0.02 else ""
        print(f"{metric:5} {ours:15.3f} {theirs:10.3f} {theirs / ours:12.4f} "
              f"{signed(o_off, 13)} {signed(a_off, 15)}{flag}")  # fmt: skip
    print("\neach tool run" + (" (server: llama-server's /metrics counters)" if llama else ""))
    print("\n".join(run_costs))
    if parts:
        print(f"\npytest-latency's offset decomposed ({args.requests} calls in this process, same "
              "request; ms p50 / p90 / p99):")  # fmt: skip
        for name, values in parts.items():
            block = pct_block(values)
            print(f"  {name:15} " + " / ".join(f"{block[f'p{p:g}']:.3f}" for p in PCTS))
    walls = {
        tool: [w for t, _, _, _, w in results if t == tool] for tool in ("pytest-latency", "AIPerf")
    }
    print("\nwall time of a whole run (start-up included): "
          + ", ".join(f"{t} {min(w):.1f}–{max(w):.1f} s" for t, w in walls.items()))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
