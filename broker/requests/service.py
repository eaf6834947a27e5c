"""The client-facing gRPC service (``annal.v1.Annal``), on the broker's event loop.

A thin edge: each rpc goes to the part of the broker that owns it:

* the data path (``data_api.py``): Produce, Fetch, ListOffsets,
  OffsetsForLeaderEpoch, DeleteRecords;
* cluster metadata and administration (``admin_manager.py``): Metadata,
  topics, partitions, configs, elections, reassignments;
* groups (``group_api.py``): FindCoordinator, OffsetCommit, OffsetFetch;
* idempotent producers' ids (``producer_ids.py``): InitProducerId;
* partition leaders' producer state (``producers_api.py``): DescribeProducers;
* ACLs and SCRAM credentials (``security_admin.py``): CreateAcls, DescribeAcls,
  DeleteAcls, DescribeUserScramCredentials, AlterUserScramCredentials (UNIMPLEMENTED
  on a broker built without a ``SecurityAdmin``).

Request-level problems are gRPC statuses (INVALID_ARGUMENT with a message,
RESOURCE_EXHAUSTED past the request limits); per-topic and per-partition
problems are Kafka error codes in the response.  Record data passes through
as raw batch bytes.

Every rpc hands the caller's session (``grpc_session``: its certificate's
principal, or User:ANONYMOUS) to the part that answers it, which authorizes
the request as the Kafka listener's requests are (docs/security.md).
"""

from __future__ import annotations

from typing import TypeAlias

import grpc
from annal.broker.admin_manager import AdminManager
from annal.broker.data_api import DataApi
from annal.broker.groups.group_api import GroupApi
from annal.broker.producer_ids import InitProducerIdApi
from annal.broker.producers_api import ProducersApi
from annal.broker.requests import grpc_data
from annal.broker.requests.grpc_auth import metadata_value
from annal.broker.security.security_admin import SecurityAdmin
from annal.broker.transactions.api import TransactionApi
from annal.client.security import USER_HEADER
from annal.security.acl import USER_TYPE, KafkaPrincipal
from annal.security.session import Session, principal_from_common_name
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc

Context: TypeAlias = grpc.aio.ServicerContext


class AnnalService(annal_pb2_grpc.AnnalServicer):
    """Runs on the event loop only; the parts it delegates to say what they share."""

    def __init__(
        self,
        data: DataApi,
        admin: AdminManager,
        groups: GroupApi,
        producer_ids: InitProducerIdApi,
        security: SecurityAdmin | None = None,
        transactions: TransactionApi | None = None,
        producers: ProducersApi | None = None,
    ) -> None:
        self._data = data
        self._admin = admin
        self._groups = groups
        self._producer_ids = producer_ids
        self._security = security
        self._transactions = transactions
        self._producers = producers

    async def _security_admin(self, context: Context) -> SecurityAdmin:
        if self._security is None:
            await context.abort(
                grpc.StatusCode.UNIMPLEMENTED,
                "this broker serves no ACL or SCRAM administration (no SecurityAdmin)",
            )
        assert self._security is not None
        return self._security

    async def Metadata(self, request: pb.MetadataRequest, context: Context) -> pb.MetadataResponse:
        return await self._admin.metadata(request, grpc_session(context))

    async def Produce(self, request: pb.ProduceRequest, context: Context) -> pb.ProduceResponse:
        answer = await self._data.produce(
            grpc_data.produce_request(request), context, grpc_session(context)
        )
        return grpc_data.produce_response(answer)

    async def Fetch(self, request: pb.FetchRequest, context: Context) -> pb.FetchResponse:
        answer = await self._data.fetch(
            grpc_data.fetch_request(request), context, grpc_session(context)
        )
        return grpc_data.fetch_response(answer)

    async def ListOffsets(
        self, request: pb.ListOffsetsRequest, context: Context
    ) -> pb.ListOffsetsResponse:
        answer = self._data.list_offsets(
            grpc_data.list_offsets_request(request), grpc_session(context)
        )
        return grpc_data.list_offsets_response(answer)

    async def OffsetsForLeaderEpoch(
        self, request: pb.OffsetsForLeaderEpochRequest, context: Context
    ) -> pb.OffsetsForLeaderEpochResponse:
        answer = self._data.offsets_for_leader_epoch(
            grpc_data.epochs_request(request), grpc_session(context)
        )
        return grpc_data.epochs_response(answer)

    async def DescribeLogDirs(
        self, request: pb.DescribeLogDirsRequest, context: Context
    ) -> pb.DescribeLogDirsResponse:
        return self._data.describe_log_dirs(request, grpc_session(context))

    async def DeleteRecords(
        self, request: pb.DeleteRecordsRequest, context: Context
    ) -> pb.DeleteRecordsResponse:
        return await self._data.delete_records(request, context, grpc_session(context))

    async def CreateTopics(
        self, request: pb.CreateTopicsRequest, context: Context
    ) -> pb.CreateTopicsResponse:
        return await self._admin.create_topics(request, context, grpc_session(context))

    async def CreatePartitions(
        self, request: pb.CreatePartitionsRequest, context: Context
    ) -> pb.CreatePartitionsResponse:
        return await self._admin.create_partitions(request, context, grpc_session(context))

    async def DeleteTopics(
        self, request: pb.DeleteTopicsRequest, context: Context
    ) -> pb.DeleteTopicsResponse:
        return await self._admin.delete_topics(request, context, grpc_session(context))

    async def DescribeConfigs(
        self, request: pb.DescribeConfigsRequest, context: Context
    ) -> pb.DescribeConfigsResponse:
        return await self._admin.describe_configs(request, grpc_session(context))

    async def AlterConfigs(
        self, request: pb.AlterConfigsRequest, context: Context
    ) -> pb.AlterConfigsResponse:
        return await self._admin.alter_configs(request, grpc_session(context))

    async def ElectLeaders(
        self, request: pb.ElectLeadersRequest, context: Context
    ) -> pb.ElectLeadersResponse:
        return await self._admin.elect_leaders(request, context, grpc_session(context))

    async def AlterPartitionReassignments(
        self, request: pb.AlterPartitionReassignmentsRequest, context: Context
    ) -> pb.AlterPartitionReassignmentsResponse:
        return await self._admin.alter_partition_reassignments(request, grpc_session(context))

    async def FindCoordinator(
        self, request: pb.FindCoordinatorRequest, context: Context
    ) -> pb.FindCoordinatorResponse:
        return await self._groups.find_coordinator(request, grpc_session(context))

    async def OffsetCommit(
        self, request: pb.OffsetCommitRequest, context: Context
    ) -> pb.OffsetCommitResponse:
        return await self._groups.offset_commit(request, context, grpc_session(context))

    async def OffsetFetch(
        self, request: pb.OffsetFetchRequest, context: Context
    ) -> pb.OffsetFetchResponse:
        return self._groups.offset_fetch(request, grpc_session(context))

    async def TxnOffsetCommit(
        self, request: pb.TxnOffsetCommitRequest, context: Context
    ) -> pb.OffsetCommitResponse:
        return await self._groups.txn_offset_commit(request, context, grpc_session(context))

    async def ListGroups(
        self, request: pb.ListGroupsRequest, context: Context
    ) -> pb.ListGroupsResponse:
        return self._groups.list_groups(grpc_session(context))

    async def DeleteGroup(
        self, request: pb.DeleteGroupRequest, context: Context
    ) -> pb.DeleteGroupResponse:
        return await self._groups.delete_group(request, grpc_session(context))

    async def DescribeGroup(
        self, request: pb.DescribeGroupRequest, context: Context
    ) -> pb.DescribeGroupResponse:
        return self._groups.describe_group(request, grpc_session(context))

    async def InitProducerId(
        self, request: pb.InitProducerIdRequest, context: Context
    ) -> pb.InitProducerIdResponse:
        return await self._producer_ids.init_producer_id(request, grpc_session(context))

    # Transactions (broker/transactions/api.py)

    async def _txn(self, context: Context) -> TransactionApi:
        if self._transactions is None:
            await context.abort(
                grpc.StatusCode.UNIMPLEMENTED, "this broker has no transaction coordinator"
            )
        assert self._transactions is not None
        return self._transactions

    async def AddPartitionsToTxn(
        self, request: pb.AddPartitionsToTxnRequest, context: Context
    ) -> pb.AddPartitionsToTxnResponse:
        return await (await self._txn(context)).add_partitions(request, grpc_session(context))

    async def AddOffsetsToTxn(
        self, request: pb.AddOffsetsToTxnRequest, context: Context
    ) -> pb.TxnResponse:
        return await (await self._txn(context)).add_offsets(request, grpc_session(context))

    async def EndTxn(self, request: pb.EndTxnRequest, context: Context) -> pb.TxnResponse:
        return await (await self._txn(context)).end_txn(request, grpc_session(context))

    async def DescribeTransactions(
        self, request: pb.DescribeTransactionsRequest, context: Context
    ) -> pb.DescribeTransactionsResponse:
        return (await self._txn(context)).describe(request, grpc_session(context))

    async def ListTransactions(
        self, request: pb.ListTransactionsRequest, context: Context
    ) -> pb.ListTransactionsResponse:
        return (await self._txn(context)).listing(request, grpc_session(context))

    async def DescribeProducers(
        self, request: pb.DescribeProducersRequest, context: Context
    ) -> pb.DescribeProducersResponse:
        if self._producers is None:
            await context.abort(
                grpc.StatusCode.UNIMPLEMENTED, "this broker serves no DescribeProducers"
            )
        assert self._producers is not None
        return self._producers.describe_producers(request, grpc_session(context))

    # ACLs and SCRAM credentials; what a caller needs: security_admin.REQUIRED_ACCESS

    async def CreateAcls(
        self, request: pb.CreateAclsRequest, context: Context
    ) -> pb.CreateAclsResponse:
        security = await self._security_admin(context)
        return await security.create_acls(request, grpc_session(context))

    async def DescribeAcls(
        self, request: pb.DescribeAclsRequest, context: Context
    ) -> pb.DescribeAclsResponse:
        security = await self._security_admin(context)
        return await security.describe_acls(request, grpc_session(context))

    async def DeleteAcls(
        self, request: pb.DeleteAclsRequest, context: Context
    ) -> pb.DeleteAclsResponse:
        security = await self._security_admin(context)
        return await security.delete_acls(request, grpc_session(context))

    async def DescribeUserScramCredentials(
        self, request: pb.DescribeUserScramCredentialsRequest, context: Context
    ) -> pb.DescribeUserScramCredentialsResponse:
        security = await self._security_admin(context)
        return await security.describe_user_scram_credentials(request, grpc_session(context))

    async def AlterUserScramCredentials(
        self, request: pb.AlterUserScramCredentialsRequest, context: Context
    ) -> pb.AlterUserScramCredentialsResponse:
        security = await self._security_admin(context)
        return await security.alter_user_scram_credentials(request, grpc_session(context))


def grpc_session(context: Context) -> Session:
    """Who a gRPC call is from: ``User:<name>`` of the user its password proved
    (broker/requests/grpc_auth.py checked it before the call got here), else ``User:<CN>``
    of its TLS client certificate, else ``User:ANONYMOUS`` (docs/security.md); the
    peer's address; the listener GRPC or GRPCS."""
    auth = context.auth_context() or {}
    names = auth.get("x509_common_name") or []
    peer = context.peer() or ""  # "ipv4:127.0.0.1:53211", "ipv6:[::1]:53211"
    host = peer.partition(":")[2].rpartition(":")[0].strip("[]")
    listener = "GRPCS" if auth.get("transport_security_type") == [b"ssl"] else "GRPC"
    user = metadata_value(context.invocation_metadata(), USER_HEADER)
    if user is not None and listener == "GRPCS":
        return Session(KafkaPrincipal(USER_TYPE, user), host, listener)
    return Session(principal_from_common_name(names[0] if names else None), host, listener)
