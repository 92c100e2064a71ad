"""A hostile client against ``rtc serve``: every finding of issue 9's server paragraph.

One server with tight limits (and a key it made itself) serves this module; each test opens its
own sessions and closes them, so the adapter quotas start empty. Clients are the real SDK
0.38 where the SDK can say what an attacker wants, and raw HTTP where it cannot.
"""

from __future__ import annotations

import json
import math
import re
import socket
import urllib.parse

import httpx
import numpy as np
import pytest
import tinker
import zstandard
from tinker import types
from tinker.proto import tinker_public_pb2 as pb
from tinker.proto.request_conv import forward_backward_request_to_proto
from tiny_kit import next_token_datum, start_server, stop_server

BASE = "Qwen/Qwen3-8B"
TIGHT = (
    "--max-body-mb",
    "1",
    "--max-inflated-mb",
    "2",
    "--max-request-tokens",
    "256",
    "--max-sample-tokens",
    "64",
    "--max-adapters-per-session",
    "3",
    "--max-adapters",
    "5",
)


@pytest.fixture(scope="module")
def tight(tmp_path_factory, tiny_dir):
    running = start_server(tmp_path_factory.mktemp("tight-state"), *TIGHT, api_key=None)
    yield running
    assert stop_server(running) == 0, "".join(running.output[-40:])
    assert "Traceback" not in "".join(running.output)


@pytest.fixture
def sdk(tight):
    """sdk() -> a new ServiceClient (one session) on the tight server, closed after the test."""
    made: list[tinker.ServiceClient] = []

    def make() -> tinker.ServiceClient:
        made.append(tinker.ServiceClient(base_url=tight.url, api_key=tight.api_key))
        return made[-1]

    yield make
    for client in made:
        client.close("success").result()


@pytest.fixture
def http(tight):
    with httpx.Client(base_url=tight.url, headers={"X-API-Key": tight.api_key}, timeout=60) as client:
        yield client


def session_of(service: tinker.ServiceClient) -> str:
    return service.holder.get_session_id()


def new_session(http) -> str:
    return http.post("/api/v1/create_session", json={}).json()["session_id"]


def result(http, request_id: str) -> httpx.Response:
    return http.post("/api/v1/retrieve_future", json={"request_id": request_id})


def fb_body(model_id: str, seq_id: int, datums: list[types.Datum], loss_fn: str = "cross_entropy") -> bytes:
    request = types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(data=datums, loss_fn=loss_fn),
        model_id=model_id,
        seq_id=seq_id,
    )
    return forward_backward_request_to_proto(request).SerializeToString()


PROTOBUF = {"Content-Type": "application/x-protobuf"}


# ----- the server's key --------------------------------------------------------------------


def test_without_a_key_the_server_makes_one_prints_it_and_requires_it(tight):
    banner = "".join(tight.output)
    assert re.search(r"^  export TINKER_API_KEY=tml-[A-Za-z0-9_-]{40,}$", banner, re.MULTILINE), banner
    assert f"  export TINKER_BASE_URL={tight.url}\n" in banner
    health = f"{tight.url}/api/v1/healthz"
    assert httpx.get(health).status_code == 401
    assert httpx.get(health, headers={"X-API-Key": "tml-local"}).status_code == 401
    assert httpx.get(health, headers={"X-API-Key": tight.api_key}).json() == {"status": "ok"}
    with pytest.raises(tinker.AuthenticationError):
        tinker.ServiceClient(base_url=tight.url, api_key="tml-local").create_sampling_client(
            base_model=BASE
        ).result()


def test_the_key_is_checked_before_the_body_is_read(tight):
    reply = raw_request(tight, "POST", "/api/v1/forward_backward", {"Content-Length": str(1 << 30)})
    assert reply.startswith("HTTP/1.1 401"), reply


def test_keys_are_compared_in_constant_time(monkeypatch):
    from rtc.server import middleware

    calls = []

    def compare(a, b):
        calls.append((a, b))
        return a == b

    monkeypatch.setattr(middleware.hmac, "compare_digest", compare)
    assert middleware.key_matches(b"tml-right", b"tml-right")
    assert not middleware.key_matches(b"tml-wrong", b"tml-right")
    assert not middleware.key_matches(None, b"tml-right")
    assert calls == [(b"tml-right", b"tml-right"), (b"tml-wrong", b"tml-right")]


# ----- ownership: two real SDK clients on one server ------------------------------------------


def guesses(own_request_id: str) -> list[str]:
    """Request ids an attacker would try next to its own."""
    sequential = re.fullmatch(r"req-(\d+)", own_request_id)
    if sequential:
        return [f"req-{n}" for n in range(1, int(sequential.group(1)) + 20)]
    head, last = own_request_id[:-1], own_request_id[-1]
    return [f"{head}{c}" for c in "0123456789abcdef" if c != last] + ["req-1", "req-2", "req-3"]


def harvest(http, own_request_id: str, own_session: str) -> set[str]:
    """Every other session's model id an attacker can read out of retrieve_future."""
    found = set()
    for request_id in guesses(own_request_id):
        response = result(http, request_id)
        if response.status_code == 200 and "json" in response.headers["content-type"]:
            model_id = response.json().get("model_id")
            if model_id and not model_id.startswith(own_session):
                found.add(model_id)
    return found


def test_request_ids_are_random_not_sequential(http):
    session = new_session(http)
    body = {"session_id": session, "base_model": BASE, "lora_config": {"rank": 1}}
    ids = [
        http.post("/api/v1/create_model", json={**body, "model_seq_id": n}).json()["request_id"]
        for n in range(3)
    ]
    assert all(re.fullmatch(r"req-[0-9a-f]{32}", i) for i in ids), ids
    assert len({int(i[4:], 16) for i in ids}) == 3
    assert http.post(f"/api/v1/sessions/{session}/finish", json={}).status_code == 200


def test_a_second_sdk_client_can_neither_read_nor_finish_the_firsts_work(sdk, http, sentence):
    victim = sdk()
    trainer = victim.create_lora_training_client(base_model=BASE, rank=2, seed=0).result()
    datum = next_token_datum(sentence)
    trainer.forward_backward([datum], "cross_entropy").result()
    # A checkpoint path a user might print in a shared log or paste into an issue.
    path = trainer.save_state("shared").result().path
    victim_session = session_of(victim)

    attacker = sdk()
    attacker.create_lora_training_client(base_model=BASE, rank=1).result()
    own_session = session_of(attacker)
    own = http.post(
        "/api/v1/create_model",
        json={"session_id": own_session, "model_seq_id": 99, "base_model": BASE, "lora_config": {"rank": 1}},
    ).json()["request_id"]

    stolen = harvest(http, own, own_session)
    # The path names neither the victim's session nor its model.
    assert victim_session not in path and trainer.model_id not in path
    run = urllib.parse.urlparse(path).netloc
    for model_id in stolen | {run.replace("_", ":")}:
        session = model_id.split(":", 1)[0]
        http.post(f"/api/v1/sessions/{session}/finish", json={})
        http.post("/api/v1/optim_step", json={"model_id": model_id, "seq_id": 50, "optim_params": {}})
    assert stolen == set()

    # Whoever holds a path can load the weights (a resumed loop must), into its own session only.
    loaded = attacker.create_training_client_from_state(path).result()
    assert loaded.model_id.startswith(own_session)
    # The victim trains on, undisturbed.
    after = trainer.forward_backward([datum], "cross_entropy").result()
    assert after.metrics["loss:sum"] > 0
    heartbeat = http.post("/api/v1/session_heartbeat", json={"session_id": victim_session})
    assert heartbeat.status_code == 200


def test_finishing_a_session_frees_its_work_for_no_one_else(sdk, http, sentence):
    owner = sdk()
    client = owner.create_lora_training_client(base_model=BASE, rank=1).result()
    session = session_of(owner)
    assert http.post(f"/api/v1/sessions/{session}/finish", json={}).status_code == 200
    assert http.post("/api/v1/get_info", json={"model_id": client.model_id}).status_code == 404
    assert http.post("/api/v1/session_heartbeat", json={"session_id": session}).status_code == 410


# ----- bodies -----------------------------------------------------------------------------


def raw_request(server, method: str, path: str, headers: dict[str, str], body: bytes = b"") -> str:
    """Send a request by hand (httpx cannot lie about Content-Length); the status line and body."""
    url = urllib.parse.urlparse(server.url)
    lines = [f"{method} {path} HTTP/1.1", f"Host: {url.netloc}", *(f"{k}: {v}" for k, v in headers.items())]
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        sock.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    return reply.decode("latin-1")


def test_a_body_over_the_limit_is_refused_before_it_is_read(tight, http):
    headers = {"X-API-Key": tight.api_key, "Content-Length": str(60 << 20)}
    reply = raw_request(tight, "POST", "/api/v1/forward_backward", headers)
    assert reply.startswith("HTTP/1.1 413"), reply
    assert "--max-body-mb" in reply
    assert http.get("/api/v1/healthz").json() == {"status": "ok"}


def test_a_streamed_body_over_the_limit_is_refused():
    import asyncio

    from rtc.server.limits import Limits
    from rtc.server.middleware import Guard

    reached = []

    async def app(scope, receive, send):
        reached.append(scope["path"])

    async def scenario():
        chunks = [{"type": "http.request", "body": b"x" * 600_000, "more_body": True}] * 3
        sent = []

        async def receive():
            return chunks.pop(0)

        async def send(message):
            sent.append(message)

        scope = {
            "type": "http",
            "path": "/api/v1/forward_backward",
            "headers": [(b"transfer-encoding", b"chunked")],
        }
        await Guard(app, None, Limits(max_body_bytes=1 << 20))(scope, receive, send)
        return sent

    sent = asyncio.run(scenario())
    assert sent[0]["status"] == 413 and not reached
    assert b"--max-body-mb" in sent[1]["body"]


def test_a_zstd_bomb_is_refused_and_a_real_zstd_body_works(tight, http, sdk, sentence):
    bomb = zstandard.ZstdCompressor().compress(b"\0" * (3 << 20))
    assert len(bomb) < 1000
    headers = {**PROTOBUF, "Content-Encoding": "zstd"}
    response = http.post("/api/v1/forward_backward", content=bomb, headers=headers)
    assert response.status_code == 413 and "--max-inflated-mb" in response.json()["detail"]
    gzipped = {**PROTOBUF, "Content-Encoding": "gzip"}
    gzip = http.post("/api/v1/forward_backward", content=b"x", headers=gzipped)
    assert gzip.status_code == 415

    client = sdk().create_lora_training_client(base_model=BASE, rank=1).result()
    body = zstandard.ZstdCompressor().compress(fb_body(client.model_id, 1, [next_token_datum(sentence)]))
    accepted = http.post("/api/v1/forward_backward", content=body, headers=headers)
    assert accepted.status_code == 200, accepted.text
    assert result(http, accepted.json()["request_id"]).status_code == 200


# ----- work per request -------------------------------------------------------------------


def test_tokens_per_request_are_limited_and_the_sdk_splits_to_fit(sdk, sentence):
    client = sdk().create_lora_training_client(base_model=BASE, rank=1).result()
    long = (sentence * 15)[:300]
    with pytest.raises(tinker.BadRequestError, match="--max-request-tokens 256"):
        client.forward_backward([next_token_datum(long)], "cross_entropy").result()
    # 4 x 100 tokens is over the limit together: the server told the SDK to send smaller chunks.
    batch = [next_token_datum((sentence * 5)[i : i + 101]) for i in range(4)]
    output = client.forward_backward(batch, "cross_entropy").result()
    assert len(output.loss_fn_outputs) == 4 and output.metrics["loss:sum"] > 0


def test_samples_times_tokens_are_limited(sdk, sentence):
    sampler = sdk().create_sampling_client(base_model=BASE).result()
    prompt = types.ModelInput.from_ints(sentence)
    refusal = "8 samples x 16 tokens = 128 tokens, over --max-sample-tokens"
    with pytest.raises(tinker.BadRequestError, match=refusal):
        sampler.sample(prompt, 8, types.SamplingParams(max_tokens=16, stop=[])).result()
    sequences = sampler.sample(prompt, 4, types.SamplingParams(max_tokens=16, stop=[])).result().sequences
    assert [len(s.tokens) for s in sequences] == [16] * 4


# ----- adapters ---------------------------------------------------------------------------


def test_training_clients_per_session_are_limited(sdk):
    service = sdk()
    for _ in range(3):
        service.create_lora_training_client(base_model=BASE, rank=1).result()
    with pytest.raises(tinker.PermissionDeniedError, match="--max-adapters-per-session"):
        service.create_lora_training_client(base_model=BASE, rank=1).result()


def test_old_snapshots_of_a_session_make_room_for_new_ones(sdk, tight, http, sentence):
    """A loop that snapshots its weights every step keeps the newest, within its quota."""
    client = sdk().create_lora_training_client(base_model=BASE, rank=1, seed=0).result()
    samplers = [client.save_weights_and_get_sampling_client().result() for _ in range(3)]
    first = http.get(f"/api/v1/samplers/{samplers[0]._sampling_session_id}")
    assert first.status_code == 410 and "evicted" in first.json()["detail"]
    latest = samplers[-1].compute_logprobs(types.ModelInput.from_ints(sentence)).result()
    assert len(latest) == len(sentence)


def test_adapters_in_total_are_limited_and_no_session_evicts_anothers(sdk, http, sentence):
    first, second = sdk(), sdk()
    trainer = first.create_lora_training_client(base_model=BASE, rank=1).result()
    snapshot = trainer.save_weights_and_get_sampling_client().result()
    first.create_lora_training_client(base_model=BASE, rank=1).result()
    for _ in range(2):
        second.create_lora_training_client(base_model=BASE, rank=1).result()
    with pytest.raises(tinker.PermissionDeniedError, match="--max-adapters allows"):
        second.create_lora_training_client(base_model=BASE, rank=1).result()
    # The first session's snapshot was not evicted to make room for the second.
    assert len(snapshot.compute_logprobs(types.ModelInput.from_ints(sentence)).result()) == len(sentence)


# ----- numbers ----------------------------------------------------------------------------


def test_nan_in_loss_inputs_is_refused_and_the_adapter_stays_finite(sdk, sentence):
    client = sdk().create_lora_training_client(base_model=BASE, rank=1, seed=0).result()
    poisoned = next_token_datum(sentence, [math.nan] * (len(sentence) - 1))
    with pytest.raises(tinker.BadRequestError, match="finite"):
        client.forward_backward([poisoned], "cross_entropy").result()
    client.forward_backward([next_token_datum(sentence)], "cross_entropy").result()
    metrics = client.optim_step(types.AdamParams(learning_rate=1e-3)).result().metrics
    assert math.isfinite(metrics["grad_norm:mean"])


LEARNING_RATE = "optim_step.optim_params.learning_rate"


@pytest.mark.parametrize(
    ("endpoint", "change", "field"),
    [
        ("create_model", {"lora_config": {"rank": 1, "seed": 2**70}}, "create_model.lora_config.seed"),
        ("optim_step", {"optim_params": {"learning_rate": 1e300}}, LEARNING_RATE),
        ("optim_step", {"optim_params": {"learning_rate": math.nan}}, LEARNING_RATE),
        ("optim_step", {"optim_params": {"beta1": math.inf}}, "optim_step.optim_params.beta1"),
        ("asample", {"sampling_params": {"max_tokens": 2, "seed": 2**70}}, "asample.sampling_params.seed"),
        ("asample", {"sampling_params": {"temperature": 1e-300}}, "asample.sampling_params"),
        ("asample", {"num_samples": 10**30}, "asample.num_samples"),
    ],
)
def test_non_finite_and_overflowing_numbers_are_400s(http, endpoint, change, field):
    session = new_session(http)
    created = http.post(
        "/api/v1/create_model",
        json={"session_id": session, "model_seq_id": 0, "base_model": BASE, "lora_config": {"rank": 1}},
    ).json()
    assert result(http, created["request_id"]).status_code == 200
    sampler = http.post(
        "/api/v1/create_sampling_session",
        json={"session_id": session, "sampling_session_seq_id": 0, "base_model": BASE},
    ).json()["sampling_session_id"]
    bodies = {
        "create_model": {"session_id": session, "model_seq_id": 1, "base_model": BASE},
        "optim_step": {"model_id": created["model_id"], "seq_id": 1},
        "asample": {"sampling_session_id": sampler, "prompt": {"chunks": [{"tokens": [1, 2]}]}},
    }
    # json.dumps writes NaN and Infinity as the bare words Python's parser reads back.
    content = json.dumps({**bodies[endpoint], **change})
    response = http.post(f"/api/v1/{endpoint}", content=content, headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    assert response.json()["detail"].startswith(field), response.json()
    http.post(f"/api/v1/sessions/{session}/finish", json={})


def test_a_non_finite_loss_config_is_a_400(sdk, http, sentence):
    client = sdk().create_lora_training_client(base_model=BASE, rank=1).result()
    zeros = [0.0] * (len(sentence) - 1)
    datum = next_token_datum(sentence, logprobs=zeros, advantages=[1.0] * len(zeros))
    message = pb.ForwardBackwardRequest()
    message.ParseFromString(fb_body(client.model_id, 1, [datum], "ppo"))
    message.loss_fn_config["clip_high_threshold"] = math.inf
    response = http.post("/api/v1/forward_backward", content=message.SerializeToString(), headers=PROTOBUF)
    assert response.status_code == 400 and "finite" in response.json()["detail"]


def sparse_weights(message: pb.ForwardBackwardRequest, rows: int, crow: list[int], col: list[int]) -> None:
    weights = message.data[0].loss_fn_inputs["weights"]
    weights.Clear()
    weights.dtype = pb.DTYPE_FLOAT32
    weights.shape.extend([rows, 1])
    weights.sparse_csr.values = np.ones(len(col), dtype=np.float32).tobytes()
    weights.sparse_csr.crow_indices = np.asarray(crow, dtype=np.int64).tobytes()
    weights.sparse_csr.col_indices = np.asarray(col, dtype=np.int64).tobytes()


def test_a_bad_sparse_tensor_is_a_json_400_not_a_500(sdk, http, sentence):
    client = sdk().create_lora_training_client(base_model=BASE, rank=1).result()
    message = pb.ForwardBackwardRequest()
    message.ParseFromString(fb_body(client.model_id, 1, [next_token_datum(sentence[:4])]))
    for crow, col, complaint in (
        ([0, 1, 2, 3], [0, 0, 99], "col_indices"),
        ([0, 1, 5, 3], [0, 0, 0], "crow_indices"),
        ([0, 1], [0], "crow_indices"),
    ):
        sparse_weights(message, 3, crow, col)
        body = message.SerializeToString()
        response = http.post("/api/v1/forward_backward", content=body, headers=PROTOBUF)
        assert response.status_code == 400, response.text
        assert response.headers["content-type"] == "application/json"
        assert complaint in response.json()["detail"]
    # A shape that would make the server allocate terabytes is refused before anything is made.
    sparse_weights(message, 3, [0, 1, 2, 3], [0, 0, 0])
    message.data[0].loss_fn_inputs["weights"].shape[:] = [10**6, 10**6]
    response = http.post("/api/v1/forward_backward", content=message.SerializeToString(), headers=PROTOBUF)
    assert response.status_code == 400 and "larger" in response.json()["detail"]


def test_a_result_that_cannot_be_encoded_is_an_error_result_not_a_500(sdk, http, sentence):
    """Finite but enormous weights make the gradient overflow: the grad norm is not JSON."""
    client = sdk().create_lora_training_client(base_model=BASE, rank=1, seed=0).result()
    huge = next_token_datum(sentence, [3e38] * (len(sentence) - 1))
    client.forward_backward([huge], "cross_entropy").result()
    step = http.post(
        "/api/v1/optim_step",
        json={"model_id": client.model_id, "seq_id": 2, "optim_params": {"learning_rate": 1e-3}},
    ).json()["request_id"]
    for _ in range(2):  # the same clear answer on every poll
        polled = result(http, step)
        assert polled.status_code == 200, polled.text
        assert polled.json()["category"] == "server"
        assert "could not be encoded as JSON" in polled.json()["error"]


# ----- the engine's memory ----------------------------------------------------------------


def test_a_failed_load_frees_what_it_allocated(tiny_dir, tmp_path):
    """A sampler checkpoint has no optimizer state: loading it with one fails after the adapter
    was made. The engine must not keep it (about 700 MB on SmolLM2 each time)."""
    import asyncio

    from rtc.server import requests
    from rtc.server.engine import Engine
    from rtc.server.service import ServerOptions, TinkerService

    engine = Engine(tiny_dir, threads=1)
    service = TinkerService(engine, ServerOptions(tiny_dir, "tiny", tmp_path))

    async def outcome(reply: dict):
        return await service.futures.wait(reply["request_id"], timeout=60)

    async def scenario() -> tuple[set[str], set[str], str | None]:
        session = service.create_session()
        lora = requests.LoraConfig(rank=1, seed=0)
        model = service.create_model(
            requests.CreateModel(session_id=session, model_seq_id=0, base_model=BASE, lora_config=lora)
        )
        await outcome(model)
        saved = service.save_weights_for_sampler(
            requests.SaveWeightsForSampler(model_id=model["model_id"], seq_id=1, path="no-optimizer")
        )
        path = json.loads((await outcome(saved)).body)["path"]
        before = set(engine._peft.peft_config)
        load = requests.LoadWeights(path=path, optimizer=True, session_id=session, model_seq_id=1)
        failed = await outcome(service.load_weights(load))
        return before, set(engine._peft.peft_config), failed.error

    try:
        before, after, error = asyncio.run(scenario())
    finally:
        service.close()
    assert "no optimizer state" in error
    assert after == before


def test_queued_work_of_a_finished_session_is_dropped_not_run(tiny_dir, tmp_path, sentence):
    import asyncio
    import threading

    from rtc.server import protocol, requests
    from rtc.server.engine import Engine
    from rtc.server.service import ServerOptions, TinkerService

    engine = Engine(tiny_dir, threads=1)
    service = TinkerService(engine, ServerOptions(tiny_dir, "tiny", tmp_path))

    async def scenario() -> tuple[str | None, str | None]:
        session = service.create_session()
        lora = requests.LoraConfig(rank=1, seed=0)
        created = service.create_model(
            requests.CreateModel(session_id=session, model_seq_id=0, base_model=BASE, lora_config=lora)
        )
        await service.futures.wait(created["request_id"], timeout=60)
        model_id = created["model_id"]
        gate = threading.Event()
        busy = asyncio.ensure_future(service.on_engine(gate.wait))  # another client's long request
        datum = next_token_datum(sentence)
        replies = [
            service.forward_backward(protocol.decode_forward_backward(fb_body(model_id, seq, [datum])))
            for seq in (1, 2)
        ]
        await asyncio.sleep(0.05)
        finishing = asyncio.ensure_future(service.finish_session(session))
        await asyncio.sleep(0.05)
        gate.set()
        await busy
        await finishing
        outcomes = [await service.futures.wait(r["request_id"], timeout=60) for r in replies]
        return outcomes[0].error, outcomes[1].error

    try:
        first, second = asyncio.run(scenario())
    finally:
        service.close()
    # The first was queued on the engine thread (behind the other client's request): the scheduler
    # drops it when its session finishes. The second was still waiting in the client's lane.
    assert first is not None and first.startswith("dropped:") and first.endswith("has gone")
    assert second is not None and second.endswith("has finished; its queued work was dropped")
