"""Futures and per-client ordering, and the long poll of retrieve_future."""

from __future__ import annotations

import asyncio
import time

import httpx

from rtc.server import futures
from rtc.server.futures import FutureStore, OrderedLane, Outcome


def test_lane_runs_jobs_in_seq_id_order_whatever_the_arrival_order():
    async def scenario() -> list[int]:
        ran: list[int] = []
        lane = OrderedLane()
        done = asyncio.Event()

        def job(seq_id: int):
            async def run() -> None:
                await asyncio.sleep(0)
                ran.append(seq_id)
                if len(ran) == 4:
                    done.set()

            return run

        for seq_id in (3, 1, 4):
            lane.submit(seq_id, job(seq_id))
            await asyncio.sleep(0.01)
        lane.submit(2, job(2))
        await asyncio.wait_for(done.wait(), 5)
        return ran

    assert asyncio.run(scenario()) == [1, 2, 3, 4]


def test_lane_skips_a_seq_id_that_never_arrives(monkeypatch):
    monkeypatch.setattr(futures, "GAP_WAIT_S", 0.2)

    async def scenario() -> list[int]:
        ran: list[int] = []
        lane = OrderedLane()
        done = asyncio.Event()

        async def run() -> None:
            ran.append(2)
            done.set()

        lane.submit(2, run)  # seq_id 1 is lost
        await asyncio.wait_for(done.wait(), 5)
        return ran

    assert asyncio.run(scenario()) == [2]


def test_store_long_polls_until_the_outcome_is_ready():
    async def scenario() -> tuple[Outcome | None, Outcome | None, float]:
        store = FutureStore()
        request_id = store.create("session-a")
        not_yet = await store.wait(request_id, timeout=0.05)
        asyncio.get_running_loop().call_later(0.2, store.resolve, request_id, Outcome(json={"ok": True}))
        start = time.monotonic()
        ready = await store.wait(request_id, timeout=5)
        return not_yet, ready, time.monotonic() - start

    not_yet, ready, waited = asyncio.run(scenario())
    assert not_yet is None
    assert ready is not None and ready.json == {"ok": True}
    assert 0.1 < waited < 2  # answered as soon as it resolved, not at the end of the poll


def test_retrieve_future_of_an_unknown_request_is_404(server):
    response = httpx.post(
        f"{server.url}/api/v1/retrieve_future",
        json={"request_id": "req-nope"},
        headers={"X-API-Key": "tml-local"},
    )
    assert response.status_code == 404


def test_session_lifecycle_and_service_endpoints(server):
    with httpx.Client(base_url=server.url, headers={"X-API-Key": "tml-local"}, timeout=10) as http:
        config = http.post("/api/v1/client/config", json={}).json()
        assert config["use_pyqwest_transport"] is False
        session = http.post("/api/v1/create_session", json={"tags": [], "sdk_version": "0.38.0"}).json()
        session_id = session["session_id"]
        assert http.post("/api/v1/session_heartbeat", json={"session_id": session_id}).status_code == 200
        assert http.post("/api/v1/telemetry", json={"events": []}).json() == {"status": "accepted"}
        models = http.get("/api/v1/get_server_capabilities").json()["supported_models"]
        assert models and models[0]["trainable"] and models[0]["sampleable"]
        finished = http.post(f"/api/v1/sessions/{session_id}/finish", json={"reason": {"type": "completed"}})
        assert finished.status_code == 200
        # The SDK stops heartbeating on 410.
        assert http.post("/api/v1/session_heartbeat", json={"session_id": session_id}).status_code == 410


def test_requests_of_one_client_run_in_seq_id_order_whatever_the_arrival(server, sentence):
    """forward (seq 3), optim_step (seq 2), forward_backward (seq 1), sent in that order."""
    from tinker import types
    from tinker.proto.request_conv import forward_backward_request_to_proto
    from tinker.proto.response_conv import deserialize_forward_backward_output
    from tiny_kit import next_token_datum

    with httpx.Client(base_url=server.url, headers={"X-API-Key": "tml-local"}, timeout=60) as http:

        def result(request_id: str):
            response = http.post("/api/v1/retrieve_future", json={"request_id": request_id})
            if "protobuf" in response.headers["content-type"]:
                return deserialize_forward_backward_output(response.content)
            return response.json()

        session = http.post("/api/v1/create_session", json={}).json()["session_id"]
        created = http.post(
            "/api/v1/create_model",
            json={
                "session_id": session,
                "model_seq_id": 0,
                "base_model": "x",
                "lora_config": {"rank": 2, "seed": 0},
            },
        ).json()
        model_id = result(created["request_id"])["model_id"]

        def loss_request(seq_id: int, forward_only: bool) -> str:
            request = types.ForwardBackwardRequest(
                forward_backward_input=types.ForwardBackwardInput(
                    data=[next_token_datum(sentence)], loss_fn="cross_entropy"
                ),
                model_id=model_id,
                seq_id=seq_id,
            )
            message = forward_backward_request_to_proto(request)
            message.forward_only = forward_only
            body = message.SerializeToString()
            headers = {"Content-Type": "application/x-protobuf"}
            return http.post("/api/v1/forward_backward", content=body, headers=headers).json()["request_id"]

        third = loss_request(3, forward_only=True)
        second = http.post(
            "/api/v1/optim_step",
            json={"model_id": model_id, "seq_id": 2, "adam_params": {"learning_rate": 0.05}},
        ).json()["request_id"]
        first = loss_request(1, forward_only=False)

        before = result(first).metrics["loss:sum"]
        assert result(second)["metrics"]["grad_norm:mean"] > 0  # the gradient of seq 1 was there
        after = result(third).metrics["loss:sum"]
        assert after < before - 0.1  # the forward of seq 3 saw the updated weights


def test_sessions_without_heartbeats_are_freed(tiny_dir, tmp_path, monkeypatch):
    from rtc.server import service as service_module
    from rtc.server.engine import Engine, LoraSettings
    from rtc.server.service import ServerOptions, Session, TinkerService, TrainingRun

    monkeypatch.setattr(service_module, "SESSION_CHECK_S", 0.01)
    engine = Engine(tiny_dir, threads=1)
    service = TinkerService(engine, ServerOptions(tiny_dir, "tiny", tmp_path))

    async def scenario() -> None:
        alive, silent = Session("alive"), Session("silent")
        silent.last_heartbeat -= service_module.SESSION_TIMEOUT_S + 1
        for session, adapter in ((alive, "train_a"), (silent, "train_s")):
            service.sessions[session.session_id] = session
            await service.on_engine(
                engine.create_training_adapter, adapter, LoraSettings(2, 0, True, True, True)
            )
            run = TrainingRun(f"{session.session_id}:train:0", session.session_id, "x", adapter, 2)
            service.runs[run.model_id] = run
        reaper = asyncio.create_task(service.reap_silent_sessions())
        await asyncio.sleep(0.3)
        reaper.cancel()
        assert silent.finished and not alive.finished
        assert list(service.runs) == ["alive:train:0"]

    try:
        asyncio.run(scenario())
    finally:
        service.close()


def test_capabilities_report_the_served_model_and_its_context_through_the_sdk(server, tiny_dir):
    """A loop reads the context length to check its rows before training (issue 9.3)."""
    import json

    import tinker

    config = json.loads((tiny_dir / "config.json").read_text())
    rest = tinker.RestClient(base_url=server.url, api_key=server.api_key)
    models = rest.get_server_capabilities().result().supported_models
    assert [(m.model_name, m.max_context_length) for m in models] == [
        ("rtc/tiny", config["max_position_embeddings"])  # the name get_info reports too
    ]
    assert models[0].trainable and models[0].sampleable
