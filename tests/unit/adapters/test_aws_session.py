"""boto3 sessions of their own that parse the service models once per process."""

from __future__ import annotations

import pytest

from app.adapters.aws_session import new_session

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


def test_sessions_are_separate_and_share_one_data_loader():
    first, second = new_session(), new_session()
    assert first is not second
    assert first._session is not second._session  # noqa: SLF001 (botocore's session)
    loaders = [s._session.get_component("data_loader") for s in (first, second)]  # noqa: SLF001
    assert loaders[0] is loaders[1]


def test_a_client_of_a_shared_loader_session_is_a_working_client():
    client = new_session().client(
        "dynamodb",
        region_name="eu-west-1",
        endpoint_url="http://127.0.0.1:1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
    assert client.meta.service_model.service_name == "dynamodb"
    assert client.meta.region_name == "eu-west-1"
    assert callable(client.get_item)


def test_many_sessions_leave_the_shared_loader_as_one_left_it():
    new_session()
    paths = list(new_session()._session.get_component("data_loader").search_paths)  # noqa: SLF001
    for _ in range(20):
        new_session()
    again = new_session()._session.get_component("data_loader").search_paths  # noqa: SLF001
    assert list(again) == paths
    assert len(set(paths)) == len(paths)
