"""Arbitrary JSON and bytes never get a 5xx and never take the server down."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

JSON_ENDPOINTS = [
    "create_model",
    "get_info",
    "optim_step",
    "save_weights",
    "save_weights_for_sampler",
    "load_weights",
    "create_sampling_session",
    "asample",
    "retrieve_future",
    "session_heartbeat",
]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
)
known_keys = st.sampled_from(
    [
        "session_id",
        "model_id",
        "seq_id",
        "model_seq_id",
        "base_model",
        "lora_config",
        "path",
        "adam_params",
        "sampling_session_id",
        "prompt",
        "sampling_params",
        "num_samples",
        "request_id",
        "optimizer",
        "model_path",
        "sampling_session_seq_id",
        "topk_prompt_logprobs",
        "prompt_logprobs",
    ]
)
bodies = st.dictionaries(known_keys | st.text(max_size=8), values, max_size=6)


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, headers={"X-API-Key": "tml-local"}, timeout=30) as session:
        yield session


@settings(
    max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(endpoint=st.sampled_from(JSON_ENDPOINTS), body=bodies)
def test_random_json_gets_a_4xx_or_a_normal_answer(http, endpoint, body):
    response = http.post(f"/api/v1/{endpoint}", json=body)
    assert response.status_code < 500, (endpoint, body, response.text)
    if response.status_code >= 400:
        assert response.json()["detail"]


@settings(
    max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=st.binary(max_size=200))
def test_random_bytes_as_a_forward_backward_request_get_a_4xx(http, body):
    headers = {"Content-Type": "application/x-protobuf"}
    response = http.post("/api/v1/forward_backward", content=body, headers=headers)
    assert 400 <= response.status_code < 500, response.text


def test_server_still_healthy_after_fuzzing(http):
    assert http.get("/api/v1/healthz").json() == {"status": "ok"}
