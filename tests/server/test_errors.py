"""Bad requests get a 4xx with a clear detail, engine failures reach the SDK, and the server lives on."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
import tinker
from tinker import types
from tinker.proto import tinker_public_pb2 as pb
from tiny_kit import next_token_datum

BASE = "Qwen/Qwen3-8B"


@pytest.fixture(scope="module")
def client(service):
    return service.create_lora_training_client(base_model=BASE, rank=2, seed=0).result()


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server.url, headers={"X-API-Key": "tml-local"}, timeout=30) as session:
        yield session


@pytest.fixture(autouse=True)
def still_serving(server, service, sentence):
    """After every test here, the server still answers and still trains."""
    yield
    assert httpx.get(f"{server.url}/api/v1/healthz", headers={"X-API-Key": "tml-local"}).json() == {
        "status": "ok"
    }
    fresh = service.create_lora_training_client(base_model=BASE, rank=2).result()
    result = fresh.forward_backward([next_token_datum(sentence)], "cross_entropy").result()
    assert result.metrics["loss:sum"] > 0


def test_unsupported_loss_is_refused(client, sentence):
    with pytest.raises(tinker.BadRequestError, match="unsupported loss_fn 'gspo'"):
        client.forward_backward([next_token_datum(sentence)], "gspo").result()


def test_unknown_loss_config_key_is_refused(service, sentence):
    fresh = service.create_lora_training_client(base_model=BASE, rank=2).result()
    with pytest.raises(tinker.BadRequestError, match="clip_epsilon"):
        fresh.forward_backward([next_token_datum(sentence)], "ppo", {"clip_epsilon": 0.2}).result()


def test_wrong_shapes_are_refused(service, sentence):
    fresh = service.create_lora_training_client(base_model=BASE, rank=2).result()
    short_targets = types.Datum(
        model_input=types.ModelInput.from_ints(sentence[:-1]),
        loss_fn_inputs={"target_tokens": sentence[1:-2]},
    )
    with pytest.raises(tinker.BadRequestError, match="target_tokens has shape"):
        fresh.forward_backward([short_targets], "cross_entropy").result()
    fresh = service.create_lora_training_client(base_model=BASE, rank=2).result()
    bad_weights = next_token_datum(sentence, [1.0] * 3)
    with pytest.raises(tinker.BadRequestError, match="weights has shape"):
        fresh.forward_backward([bad_weights], "cross_entropy").result()
    fresh = service.create_lora_training_client(base_model=BASE, rank=2).result()
    missing = next_token_datum(sentence, logprobs=[0.0] * (len(sentence) - 1))
    with pytest.raises(tinker.BadRequestError, match="advantages"):
        fresh.forward_backward([missing], "importance_sampling").result()


def test_token_outside_the_vocabulary_is_refused(service):
    fresh = service.create_lora_training_client(base_model=BASE, rank=2).result()
    with pytest.raises(tinker.BadRequestError, match="outside the vocabulary"):
        fresh.forward_backward([next_token_datum([1, 2, 10**6])], "cross_entropy").result()


def test_unknown_model_id_is_refused(http):
    response = http.post("/api/v1/get_info", json={"model_id": "nope:train:9"})
    assert response.status_code == 404 and "unknown model_id" in response.json()["detail"]
    response = http.post("/api/v1/optim_step", json={"model_id": "nope", "seq_id": 1, "adam_params": {}})
    assert response.status_code == 404


def test_unknown_model_id_in_a_protobuf_request_is_refused(http):
    message = pb.ForwardBackwardRequest(model_id="nope:train:1", seq_id=1, loss_fn="cross_entropy")
    datum = message.data.add()
    datum.model_input.add().encoded_text.tokens = np.asarray([1, 2], dtype=np.int32).tobytes()
    response = http.post(
        "/api/v1/forward_backward",
        content=message.SerializeToString(),
        headers={"Content-Type": "application/x-protobuf"},
    )
    assert response.status_code == 404


def test_malformed_bodies_are_refused(http):
    garbage = http.post(
        "/api/v1/forward_backward",
        content=b"\xff\x00garbage",
        headers={"Content-Type": "application/x-protobuf"},
    )
    assert garbage.status_code == 400 and "protobuf" in garbage.json()["detail"]
    not_json = http.post(
        "/api/v1/optim_step", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert not_json.status_code == 400 and "JSON" in not_json.json()["detail"]
    wrong_type = http.post("/api/v1/create_session", json={})
    assert wrong_type.status_code == 200
    bad_future = http.post("/api/v1/retrieve_future", json={"request_id": 5})
    assert bad_future.status_code == 400 and "request_id" in bad_future.json()["detail"]


@pytest.mark.parametrize("name", ["../escape", "a/b", "..", "/etc/passwd", ""])
def test_checkpoint_names_that_escape_the_state_dir_are_refused(client, server, name):
    with pytest.raises(tinker.BadRequestError, match="invalid checkpoint name"):
        client.save_state(name).result()
    assert not (server.state_dir.parent / "escape").exists()


def test_tinker_paths_that_escape_the_state_dir_are_refused(service, http):
    for path in (
        "tinker://../weights/x",
        "tinker://run/weights/../../x",
        "tinker://run/other/x",
        "file:///etc",
    ):
        with pytest.raises(tinker.BadRequestError):
            service.create_training_client_from_state(path).result()
    session = http.post("/api/v1/create_session", json={}).json()["session_id"]
    response = http.post(
        "/api/v1/create_sampling_session",
        json={"session_id": session, "sampling_session_seq_id": 0, "model_path": "tinker://..%2F/weights/x"},
    )
    assert response.status_code == 400


def test_missing_checkpoint_is_not_found(service):
    with pytest.raises(tinker.NotFoundError):
        service.create_training_client_from_state("tinker://somerun/weights/never-saved").result()


def test_engine_failure_reaches_the_sdk(client, service):
    """A sampler checkpoint has no optimizer state: the engine fails, and the SDK says why."""
    path = client.save_weights_for_sampler("no-optimizer").result().path
    with pytest.raises(tinker.RequestFailedError, match="no optimizer state"):
        service.create_training_client_from_state_with_optimizer(path).result()
