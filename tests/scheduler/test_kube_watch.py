"""How the one door reads a watch (pure, over a made-up response): `stream` hands out each event
as it is read, bookmarks included, each object with its kind; a 410 asks for a new list."""

import json

import pytest
from kubernetes import client

from scheduler.cluster import kube


class Response:
    def __init__(self, *events: dict) -> None:
        self.body = "".join(json.dumps(e) + "\n" for e in events).encode()
        self.released = False

    def stream(self, amt=None, decode_content=False):
        yield from (self.body[i : i + 7] for i in range(0, len(self.body), 7))  # split lines

    def release_conn(self) -> None:
        self.released = True


def gateway(response: Response) -> kube.KubeGateway:
    door = kube.KubeGateway(client.ApiClient())
    door.api.call_api = lambda *args, **kwargs: response  # type: ignore[method-assign]
    return door


def pod(name: str, rv: str) -> dict:
    return {"metadata": {"name": name, "resourceVersion": rv}}


def test_stream_hands_out_each_event_as_it_is_read_bookmarks_included():
    response = Response(
        {"type": "MODIFIED", "object": pod("b", "31")},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "40"}}},
    )
    events = gateway(response).stream("Pod", "30")
    first = next(events)
    assert first["type"] == "MODIFIED" and not response.released  # before the watch ends
    assert first["object"]["kind"] == "Pod"
    assert [e["type"] for e in events] == ["BOOKMARK"]
    assert response.released


def test_a_410_in_the_stream_asks_for_a_new_list():
    gone = Response({"type": "ERROR", "object": {"code": 410, "message": "too old"}})
    with pytest.raises(kube.ResourceVersionGone):
        list(gateway(gone).stream("Pod", "1"))
    assert gone.released
