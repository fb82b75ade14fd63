#!/usr/bin/env python3
"""A real self-hosted LLM endpoint for the integration tests: llama.cpp's ``llama-server``.

This script owns everything needed to run one on a machine that reaches only the package
registries: building ``llama-server`` from the llama.cpp tree vendored in the ``llama-cpp-python``
source distribution on PyPI, generating a tiny random-weight llama model locally (``gguf`` +
``tokenizers``; nothing comes from a model hub), and starting the server on loopback. The
integration tests import it (``tests/integration/conftest.py``); it imports nothing from
``pytest_latency`` and nothing outside the standard library at module level, so ``build``,
``serve`` and ``status`` run without the optional model-generation packages.

Subcommands: ``build``, ``model``, ``serve``, ``status``. Everything it makes lives under
``$PYTEST_LATENCY_CACHE`` (default ``~/.cache/pytest-latency``), never in the checkout.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

# The sdist pins the llama.cpp tree: one version, so the server's wire behaviour (usage fields,
# cache fields, timings) is the same on every machine and in CI.
LLAMA_CPP_PYTHON_VERSION = "0.3.36"

# A random-weight model: small enough to generate in a second and to keep TTFT at a few ms per
# hundred tokens, large enough that prompt processing visibly dominates TTFT for long prompts.
MODEL_SEED = 1234
MODEL_VOCAB_SIZE = 2048
MODEL_EMBED = 128
MODEL_LAYERS = 4
MODEL_HEADS = 4
MODEL_KV_HEADS = 2
MODEL_FF = 384
MODEL_CONTEXT = 4096

# CMake options for a CPU-only build of exactly what llama-server needs. LLAMA_BUILD_TOOLS must be
# ON because the server lives under tools/; only the llama-server target is built, so the other
# tools are configured but never compiled.
CMAKE_OPTIONS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    # One self-contained binary: no libllama.so/libggml.so to find at run time.
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_COMMON=ON",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    # The web UI: neither built with npm nor fetched prebuilt from a model hub at build time (the
    # default would try the network); the server then runs without an embedded UI.
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    # Loopback HTTP only: no TLS. (LLAMA_CURL is gone from this tree: models load from local files.)
    "-DLLAMA_OPENSSL=OFF",
    # The build is cached per machine, so tuning it for this CPU is safe and makes it faster.
    "-DGGML_NATIVE=ON",
    "-DGGML_CUDA=OFF",
    "-DGGML_METAL=OFF",
    "-DGGML_VULKAN=OFF",
    "-DGGML_BLAS=OFF",
    "-DGGML_CCACHE=OFF",
)


def cache_root() -> Path:
    """Where builds, models and logs live: outside the checkout, shared by every clone."""
    env = os.environ.get("PYTEST_LATENCY_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "pytest-latency"


def build_dir(version: str = LLAMA_CPP_PYTHON_VERSION) -> Path:
    return cache_root() / f"llama.cpp-{version}"


def server_binary(version: str = LLAMA_CPP_PYTHON_VERSION) -> Path:
    """The built ``llama-server``, or ``$LLAMA_SERVER_BIN`` when set (a system install)."""
    env = os.environ.get("LLAMA_SERVER_BIN")
    return Path(env) if env else build_dir(version) / "build" / "bin" / "llama-server"


def model_path(seed: int = MODEL_SEED) -> Path:
    return cache_root() / "models" / f"tiny-llama-random-{seed}.gguf"


def _log(message: str) -> None:
    print(f"[llama_server] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# build
# --------------------------------------------------------------------------------------------


def _download_sdist(version: str, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    existing = sorted(dest.glob(f"llama_cpp_python-{version}.tar.gz"))
    if existing:
        return existing[0]
    # pip, not a hand-made URL: the registry is reached through its ordinary client, with whatever
    # index configuration this machine has.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            f"llama-cpp-python=={version}",
            "-d",
            str(dest),
        ],
        check=False,
    )
    found = sorted(dest.glob(f"llama_cpp_python-{version}.tar.gz"))
    if not found:
        raise SystemExit(f"pip did not produce llama_cpp_python-{version}.tar.gz in {dest}")
    return found[0]


def _extract_vendored_tree(sdist: Path, version: str, dest: Path) -> Path:
    """Extract only ``vendor/llama.cpp`` from the sdist; return its path."""
    prefix = f"llama_cpp_python-{version}/vendor/llama.cpp/"
    source = dest / "src"
    if (source / "CMakeLists.txt").is_file():
        return source
    partial = dest / "src.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with tarfile.open(sdist) as archive:
        members = []
        for member in archive.getmembers():
            if not member.name.startswith(prefix) or member.name == prefix:
                continue
            member.name = member.name[len(prefix) :]
            members.append(member)
        # The "data" filter refuses absolute paths, links out of the tree and device files.
        archive.extractall(partial, members=members, filter="data")
    # Renamed only once complete, so an interrupted extraction is redone, not half-used.
    partial.rename(source)
    return source


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        # The PyPI wheels `cmake` and `ninja` put their binaries next to the interpreter.
        beside = Path(sys.executable).parent / name
        if beside.is_file():
            return str(beside)
        raise SystemExit(f"{name} not found: pip install {name} (or apt-get install {name})")
    return found


def build(version: str = LLAMA_CPP_PYTHON_VERSION, jobs: int | None = None) -> Path:
    """Build ``llama-server`` once; return the binary. A no-op when it already exists."""
    binary = server_binary(version)
    if binary.is_file():
        _log(f"already built: {binary}")
        return binary
    root = build_dir(version)
    sdist = _download_sdist(version, cache_root() / "sdist")
    source = _extract_vendored_tree(sdist, version, root)
    out = root / "build"
    cmake, ninja = _tool("cmake"), _tool("ninja")
    started = time.monotonic()
    configure = [cmake, "-S", str(source), "-B", str(out), "-G", "Ninja"]
    subprocess.run([*configure, f"-DCMAKE_MAKE_PROGRAM={ninja}", *CMAKE_OPTIONS], check=True)
    command = [cmake, "--build", str(out), "--target", "llama-server"]
    command += ["--parallel", str(jobs or os.cpu_count() or 2)]
    subprocess.run(command, check=True)
    _log(f"built {binary} in {time.monotonic() - started:.0f} s")
    return binary


# --------------------------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------------------------

# Words for the tokenizer's training text. The text only shapes the BPE merges, so generated
# pseudo-English with frequent short words gives a vocabulary on which ordinary prompts tokenize
# to roughly one token per short word, as with a real model.
_WORDS_TEXT = (
    "the of and to in is that it for was on are as with his they at be this from have or by one"
    " had not but what all were when we there can an your which their said if do will each about"
    " how up out them then she many some so these would other into has more her two like him see"
    " time could no make than first been its who now people my made over did down only way find"
    " use may water long little very after words called just where most know get through back"
    " much before go good new write our used me man too any day same right look think also around"
    " another came come work three word must because does part even place well such here take why"
    " things help put years different away again off went old number great tell men say small"
    " every found still between name should home big give air line set own under read last never"
    " us left end along while might next sound below saw something thought both few those always"
    " looked show large often together asked house don world going want school important until"
    " form food keep children feet land side without boy once animals life enough took sometimes"
    " four head above kind began almost live page got earth need far hand high year mother light"
    " parts country father let night following picture being study second eyes soon times story"
    " boys since white days ever paper hard near sentence better best across during today others"
    " however sure means knew its try told young miles sun ways thing whole hear example heard"
    " several change answer room sea against top turned learn point city play toward five using"
    " himself usually latency token cache prompt model server request response stream budget test"
    " system user assistant message question answer document context retrieval agent tool call"
)
WORDS: tuple[str, ...] = tuple(_WORDS_TEXT.split())


def _training_text(seed: int, n_words: int = 20000) -> list[str]:
    import random

    rng = random.Random(seed)
    # Zipf-like weights, so merges for common words are learned first.
    weights = [1.0 / (rank + 1) for rank in range(len(WORDS))]
    lines = []
    for _ in range(n_words // 12):
        words = rng.choices(WORDS, weights=weights, k=12)
        sentence = " ".join(words)
        lines.append(sentence[0].upper() + sentence[1:] + rng.choice([".", ".", "?", ","]))
    return lines


def _tokenizer(seed: int, vocab_size: int) -> tuple[list[str], list[str]]:
    """Train a byte-level BPE tokenizer (GPT-2 style); return (tokens by id, merges)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        # Three specials first, so their ids are stable: 0 pads, 1 begins, 2 ends a sequence.
        special_tokens=["<|pad|>", "<|bos|>", "<|eos|>"],
        # All 256 byte symbols, so any UTF-8 input tokenizes without an unknown token.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_training_text(seed), trainer=trainer)
    state = json.loads(tokenizer.to_str())
    vocab: dict[str, int] = state["model"]["vocab"]
    tokens = [""] * len(vocab)
    for text, index in vocab.items():
        tokens[index] = text
    merges = [m if isinstance(m, str) else " ".join(m) for m in state["model"]["merges"]]
    return tokens, merges


# A chat template in the Jinja subset llama-server understands; the ChatML shape makes the prompt
# length grow with the messages as a real chat model's does.
_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|bos|>' + message['role'] + '\n' + message['content'] + '<|eos|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|bos|>assistant\n' }}{% endif %}"
)


# The value held in the bias channel; after the final RMS norm it is still several units, so the
# banned tokens' logits sit tens of units below the others (~N(0, 1)).
_BIAS_CHANNEL = 16.0


def _bytes_to_unicode() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed: the printable stand-in character → the byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


_BYTE_OF = _bytes_to_unicode()


def _complete_utf8(token: str) -> bool:
    """Whether a byte-level BPE token decodes to whole UTF-8 characters."""
    try:
        bytes(_BYTE_OF[c] for c in token).decode("utf-8")
    except (KeyError, UnicodeDecodeError):
        return False
    return True


def _random(
    rng: np.random.Generator, shape: tuple[int, ...], scale: float
) -> npt.NDArray[np.float32]:
    import numpy as np

    return (rng.standard_normal(shape) * scale).astype(np.float32)


def generate_model(path: Path | None = None, seed: int = MODEL_SEED) -> Path:
    """Write a tiny random-weight llama GGUF (deterministic from ``seed``); return its path.

    A no-op when the file exists. Needs ``gguf`` (which brings numpy) and ``tokenizers``.
    """
    import gguf
    import numpy as np

    path = path or model_path(seed)
    if path.is_file():
        _log(f"model exists: {path}")
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    tokens, merges = _tokenizer(seed, MODEL_VOCAB_SIZE)
    n_vocab = len(tokens)
    token_types = [gguf.TokenType.NORMAL] * n_vocab
    for special in range(3):
        token_types[special] = gguf.TokenType.CONTROL

    partial = path.with_suffix(".partial")
    writer = gguf.GGUFWriter(str(partial), "llama")
    writer.add_name(f"pytest-latency tiny random llama (seed {seed})")
    writer.add_context_length(MODEL_CONTEXT)
    writer.add_embedding_length(MODEL_EMBED)
    writer.add_block_count(MODEL_LAYERS)
    writer.add_feed_forward_length(MODEL_FF)
    writer.add_head_count(MODEL_HEADS)
    writer.add_head_count_kv(MODEL_KV_HEADS)
    writer.add_rope_dimension_count(MODEL_EMBED // MODEL_HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_vocab_size(n_vocab)
    # "gpt2" is llama.cpp's byte-level BPE; pre-tokenizer "default" is its GPT-2 style split.
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(token_types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(_CHAT_TEMPLATE)

    rng = np.random.default_rng(seed)
    head_dim = MODEL_EMBED // MODEL_HEADS
    kv_dim = head_dim * MODEL_KV_HEADS
    # Weights scaled by 1/sqrt(fan_in) keep activations finite through the layers; the values are
    # otherwise meaningless: the model exists to be timed, not read.
    std = MODEL_EMBED**-0.5
    # Channel 0 of the residual stream is a constant "bias channel": every embedding holds
    # BIAS_CHANNEL there, the layers neither read it (norm weight 0) nor write it (output row 0),
    # and output.weight turns it into a large negative logit for the tokens this model must never
    # emit. Those are the control tokens (an end token would cut calls short at random) and the
    # lone bytes that are not complete UTF-8: llama-server withholds a stream's first event while
    # its text is an incomplete character, and its Anthropic stream then loses `message_start`.
    never = [i for i, text in enumerate(tokens) if i < 3 or not _complete_utf8(text)]
    embd = _random(rng, (n_vocab, MODEL_EMBED), 1.0)
    embd[:, 0] = _BIAS_CHANNEL
    output = _random(rng, (n_vocab, MODEL_EMBED), std)
    output[:, 0] = 0.0
    output[never, 0] = -_BIAS_CHANNEL
    unread = np.ones(MODEL_EMBED, dtype=np.float32)
    unread[0] = 0.0
    writer.add_tensor("token_embd.weight", embd)
    writer.add_tensor("output_norm.weight", np.ones(MODEL_EMBED, dtype=np.float32))
    writer.add_tensor("output.weight", output)
    for layer in range(MODEL_LAYERS):
        prefix = f"blk.{layer}"
        attn_out = _random(rng, (MODEL_EMBED, MODEL_EMBED), std)
        attn_out[0, :] = 0.0
        writer.add_tensor(f"{prefix}.attn_norm.weight", unread)
        writer.add_tensor(f"{prefix}.attn_q.weight", _random(rng, (MODEL_EMBED, MODEL_EMBED), std))
        writer.add_tensor(f"{prefix}.attn_k.weight", _random(rng, (kv_dim, MODEL_EMBED), std))
        writer.add_tensor(f"{prefix}.attn_v.weight", _random(rng, (kv_dim, MODEL_EMBED), std))
        writer.add_tensor(f"{prefix}.attn_output.weight", attn_out)
        ffn_down = _random(rng, (MODEL_EMBED, MODEL_FF), MODEL_FF**-0.5)
        ffn_down[0, :] = 0.0
        writer.add_tensor(f"{prefix}.ffn_norm.weight", unread)
        writer.add_tensor(f"{prefix}.ffn_gate.weight", _random(rng, (MODEL_FF, MODEL_EMBED), std))
        writer.add_tensor(f"{prefix}.ffn_up.weight", _random(rng, (MODEL_FF, MODEL_EMBED), std))
        writer.add_tensor(f"{prefix}.ffn_down.weight", ffn_down)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.rename(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    size = path.stat().st_size / 1e6
    _log(f"wrote {path} ({size:.1f} MB, sha256 {digest}…) in {time.monotonic() - started:.1f} s")
    return path


# --------------------------------------------------------------------------------------------
# serve
# --------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True, slots=True)
class Server:
    """A running llama-server: its process, its base URL and its log file."""

    process: subprocess.Popen[bytes]
    base_url: str
    log: Path

    def stop(self, timeout: float = 10.0) -> None:
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout)


def _healthy(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/health", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        # 503 while the model loads, refused before the socket is bound: both mean "not yet".
        return False


def start(
    binary: Path | None = None,
    model: Path | None = None,
    *,
    port: int | None = None,
    context: int = 4096,
    cache_ram_mib: int = 64,
    threads: int = 1,
    extra_args: Sequence[str] = (),
    timeout: float = 60.0,
) -> Server:
    """Start llama-server on 127.0.0.1 and wait until ``/health`` answers 200."""
    binary = binary or server_binary()
    model = model or model_path()
    for needed in (binary, model):
        if not needed.is_file():
            raise FileNotFoundError(needed)
    port = port or free_port()
    base_url = f"http://127.0.0.1:{port}"
    logs = cache_root() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"llama-server-{port}.log"
    command = [
        str(binary),
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--ctx-size",
        str(context),
        # One slot: requests are served one at a time, so a timing never includes another
        # request's work, and the prefix cache is the slot's own.
        "--parallel",
        "1",
        # Bounds the host-memory prompt cache (MiB) that keeps prefixes across requests.
        "--cache-ram",
        str(cache_ram_mib),
        # One thread by default: ggml's worker threads spin at a barrier after each op, so on a
        # 2-core machine shared with the test process (and, here, other jobs) a descheduled
        # second thread stalls the first; measured: prompt time at 1,500 tokens 0.6-1.7 s with
        # two threads under load, 0.27-0.29 s with one.
        "--threads",
        str(threads),
        "--no-webui",
        # The model's own chat template (ChatML-like, in the GGUF) renders the messages.
        "--jinja",
        *extra_args,
    ]
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT
        )
    server = Server(process, base_url, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"llama-server exited with {process.returncode}:\n{tail}")
        if _healthy(base_url):
            return server
        time.sleep(0.1)
    server.stop()
    raise TimeoutError(f"llama-server did not become healthy in {timeout} s; log: {log}")


@contextlib.contextmanager
def running(**kwargs: Any) -> Iterator[Server]:
    """``start`` as a context manager: the server is stopped on exit, whatever happened."""
    server = start(**kwargs)
    try:
        yield server
    finally:
        server.stop()


def unavailable_reason() -> str | None:
    """Why the integration tests cannot run here, or None when they can."""
    binary, model = server_binary(), model_path()
    if not binary.is_file():
        return f"llama-server not built ({binary}): run python scripts/llama_server.py build"
    if not model.is_file():
        return f"tiny model not generated ({model}): run python scripts/llama_server.py model"
    return None


# --------------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------------


def _status() -> int:
    binary, model = server_binary(), model_path()
    print(f"cache:  {cache_root()}")
    print(f"binary: {binary} ({'present' if binary.is_file() else 'missing'})")
    state = f"present, {model.stat().st_size / 1e6:.1f} MB" if model.is_file() else "missing"
    print(f"model:  {model} ({state})")
    reason = unavailable_reason()
    print("ready" if reason is None else f"not ready: {reason}")
    return 0 if reason is None else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command", required=True)
    build_cmd = commands.add_parser("build", help="build llama-server (cached; idempotent)")
    build_cmd.add_argument("--jobs", type=int, default=None)
    model_cmd = commands.add_parser("model", help="generate the tiny random-weight GGUF")
    model_cmd.add_argument("--seed", type=int, default=MODEL_SEED)
    serve_cmd = commands.add_parser("serve", help="run llama-server on 127.0.0.1 until Ctrl-C")
    serve_cmd.add_argument("--port", type=int, default=None)
    serve_cmd.add_argument("--ctx-size", type=int, default=4096)
    serve_cmd.add_argument("--cache-ram", type=int, default=64, help="prompt cache bound, MiB")
    commands.add_parser("status", help="say whether the binary and the model are in place")
    args = parser.parse_args(argv)

    if args.command == "build":
        build(jobs=args.jobs)
        return 0
    if args.command == "model":
        generate_model(model_path(args.seed), args.seed)
        return 0
    if args.command == "status":
        return _status()
    # SIGTERM (and SIGINT, which a shell ignores in background jobs) must reach the `finally`
    # below, or the server outlives this script.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    server = start(port=args.port, context=args.ctx_size, cache_ram_mib=args.cache_ram)
    print(server.base_url, flush=True)
    _log(f"log: {server.log}; Ctrl-C stops the server")
    try:
        server.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
