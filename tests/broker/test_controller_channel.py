"""The controller's channel to a broker: a broker that registers anew, at the same
address, is reached over a fresh channel at once, not after the old channel's
call to the dead process times out."""

from __future__ import annotations

import socket
import threading
import time
from concurrent import futures

import grpc
import pytest
from annal.controller.channel import ControllerChannel
from annal.controller.requests import MetadataUpdate
from annal.deploy.runner import wait_until
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc
from annal.zk.layout import BrokerRegistration


class Listening(annal_pb2_grpc.BrokerControlServicer):
    def __init__(self) -> None:
        self.heard = threading.Event()

    def UpdateMetadata(
        self, request: pb.UpdateMetadataRequest, context: grpc.ServicerContext
    ) -> pb.UpdateMetadataResponse:
        self.heard.set()
        return pb.UpdateMetadataResponse()


@pytest.mark.timeout(60)
def test_a_broker_registered_anew_gets_a_fresh_channel() -> None:
    # The old process: it takes connections and never answers, and they stay
    # open (a dead container's address that swallows packets looks the same).
    silent = socket.create_server(("127.0.0.1", 0))
    port = silent.getsockname()[1]
    held: list[socket.socket] = []

    def hold() -> None:
        while True:
            try:
                held.append(silent.accept()[0])
            except OSError:
                return

    threading.Thread(target=hold, daemon=True).start()
    channel = ControllerChannel(0)
    server: grpc.Server | None = None
    try:
        update = MetadataUpdate(partitions=(), live=())
        channel.send_update_metadata(BrokerRegistration(1, "127.0.0.1", port, None, 1), 1, update)
        wait_until(lambda: held, 5, "the old channel connected")
        silent.shutdown(socket.SHUT_RDWR)  # stops listening; ends the blocked accept()
        silent.close()  # the old connection stays, silent
        listening = Listening()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        annal_pb2_grpc.add_BrokerControlServicer_to_server(listening, server)
        assert server.add_insecure_port(f"127.0.0.1:{port}") == port
        server.start()

        started = time.monotonic()  # the broker restarted: a new registration
        channel.send_update_metadata(BrokerRegistration(1, "127.0.0.1", port, None, 2), 1, update)
        assert time.monotonic() - started < 5  # the old sender did not hold the controller
        wait_until(listening.heard.is_set, 5, "the new process reached")
    finally:
        channel.close(0)
        silent.close()
        for connection in held:
            connection.close()
        if server is not None:
            server.stop(None)
