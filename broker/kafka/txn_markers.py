"""Kafka's WriteTxnMarkers (API 27, v0-v1) on the Kafka listener: a transaction
coordinator asks this partition leader to write COMMIT or ABORT markers
(KIP-98).

The request becomes the broker's own ``WriteTxnMarkersRequest``
(``broker/requests/txn_types.py``) and goes to the same code as the BrokerControl
rpc (``ControlService.write_txn_markers``: ClusterAction on the cluster, then
``broker/transactions/leader_markers.py``); the answer groups each marker's
partitions by topic, in the order the request named them, as Kafka's
WriteTxnMarkersResponse does.  Kafka waits for the markers
on the in-sync replicas for request.timeout.ms (30 s).  v0's layout, which
``kio`` lacks, is ``txn_markers_v0.py``.

Thread safety: runs on the broker's event loop only.
"""

from __future__ import annotations

from annal.broker.control import ControlService
from annal.broker.kafka.apis import KafkaApis, Values
from annal.broker.requests import txn_types as tt
from annal.kafkaproto import legacy_versions
from annal.kafkaproto.wire import Request

WRITE_TXN_MARKERS = 27
VERSIONS = (0, 1)


class TxnMarkerApis:
    """See the module docstring."""

    def __init__(self, control: ControlService) -> None:
        self._control = control

    def register(self, apis: KafkaApis) -> None:
        legacy_versions.install()  # v0's layout, which kio lacks
        apis.add(WRITE_TXN_MARKERS, "WriteTxnMarkers", VERSIONS, self.write_txn_markers)

    async def write_txn_markers(self, request: Request) -> Values:
        answer = await self._control.write_txn_markers(
            markers_request(request.body), request.session
        )
        return markers_response(answer)


def markers_request(body: object) -> tt.WriteTxnMarkersRequest:
    """A Kafka WriteTxnMarkers request's markers, as the broker's own request."""
    return tt.WriteTxnMarkersRequest(
        [
            tt.WritableTxnMarker(
                marker.producer_id,
                marker.producer_epoch,
                bool(marker.transaction_result),
                [
                    tt.WritableTxnMarkerTopic(t.name, list(t.partition_indexes))
                    for t in marker.topics
                ],
                marker.coordinator_epoch,
            )
            for marker in getattr(body, "markers", ())
        ]
    )


def markers_response(answer: tt.WriteTxnMarkersResponse) -> Values:
    """The broker's answer as Kafka's: each marker's partitions grouped by topic."""
    markers = []
    for result in answer.markers:
        topics: dict[str, list[dict[str, int]]] = {}
        for p in result.partitions:
            topics.setdefault(p.topic, []).append(
                {"partition_index": p.partition, "error_code": p.error}
            )
        markers.append(
            {
                "producer_id": result.producer_id,
                "topics": [{"name": name, "partitions": ps} for name, ps in topics.items()],
            }
        )
    return {"markers": markers}
