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
from annal.broker.requests import (
    grpc_admin,
    grpc_data,
    grpc_groups,
    grpc_producers,
    grpc_security,
    grpc_txn,
)
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
        answer = await self._admin.metadata(
            grpc_admin.metadata_request(request), grpc_session(context)
        )
        return grpc_admin.metadata_response(answer)

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
        answer = self._data.describe_log_dirs(
            grpc_admin.log_dirs_request(request), grpc_session(context)
        )
        return grpc_admin.log_dirs_response(answer)

    async def DeleteRecords(
        self, request: pb.DeleteRecordsRequest, context: Context
    ) -> pb.DeleteRecordsResponse:
        answer = await self._data.delete_records(
            grpc_admin.delete_records_request(request), context, grpc_session(context)
        )
        return grpc_admin.delete_records_response(answer)

    async def CreateTopics(
        self, request: pb.CreateTopicsRequest, context: Context
    ) -> pb.CreateTopicsResponse:
        answer = await self._admin.create_topics(
            grpc_admin.create_topics_request(request), context, grpc_session(context)
        )
        return grpc_admin.create_topics_response(answer)

    async def CreatePartitions(
        self, request: pb.CreatePartitionsRequest, context: Context
    ) -> pb.CreatePartitionsResponse:
        answer = await self._admin.create_partitions(
            grpc_admin.create_partitions_request(request), context, grpc_session(context)
        )
        return grpc_admin.create_partitions_response(answer)

    async def DeleteTopics(
        self, request: pb.DeleteTopicsRequest, context: Context
    ) -> pb.DeleteTopicsResponse:
        answer = await self._admin.delete_topics(
            grpc_admin.delete_topics_request(request), context, grpc_session(context)
        )
        return grpc_admin.delete_topics_response(answer)

    async def DescribeConfigs(
        self, request: pb.DescribeConfigsRequest, context: Context
    ) -> pb.DescribeConfigsResponse:
        answer = await self._admin.describe_configs(
            grpc_admin.describe_configs_request(request), grpc_session(context)
        )
        return grpc_admin.describe_configs_response(answer)

    async def AlterConfigs(
        self, request: pb.AlterConfigsRequest, context: Context
    ) -> pb.AlterConfigsResponse:
        answer = await self._admin.alter_configs(
            grpc_admin.alter_configs_request(request), grpc_session(context)
        )
        return grpc_admin.alter_configs_response(answer)

    async def ElectLeaders(
        self, request: pb.ElectLeadersRequest, context: Context
    ) -> pb.ElectLeadersResponse:
        answer = await self._admin.elect_leaders(
            grpc_admin.elect_leaders_request(request), context, grpc_session(context)
        )
        return grpc_admin.elect_leaders_response(answer)

    async def AlterPartitionReassignments(
        self, request: pb.AlterPartitionReassignmentsRequest, context: Context
    ) -> pb.AlterPartitionReassignmentsResponse:
        answer = await self._admin.alter_partition_reassignments(
            grpc_admin.reassignments_request(request), grpc_session(context)
        )
        return grpc_admin.reassignments_response(answer)

    async def FindCoordinator(
        self, request: pb.FindCoordinatorRequest, context: Context
    ) -> pb.FindCoordinatorResponse:
        answer = await self._groups.find_coordinator(
            grpc_groups.find_coordinator_request(request), grpc_session(context)
        )
        return grpc_groups.find_coordinator_response(answer)

    async def OffsetCommit(
        self, request: pb.OffsetCommitRequest, context: Context
    ) -> pb.OffsetCommitResponse:
        answer = await self._groups.offset_commit(
            grpc_groups.offset_commit_request(request), context, grpc_session(context)
        )
        return grpc_groups.offset_commit_response(answer)

    async def OffsetFetch(
        self, request: pb.OffsetFetchRequest, context: Context
    ) -> pb.OffsetFetchResponse:
        answer = self._groups.offset_fetch(
            grpc_groups.offset_fetch_request(request), grpc_session(context)
        )
        return grpc_groups.offset_fetch_response(answer)

    async def TxnOffsetCommit(
        self, request: pb.TxnOffsetCommitRequest, context: Context
    ) -> pb.OffsetCommitResponse:
        answer = await self._groups.txn_offset_commit(
            grpc_groups.txn_offset_commit_request(request), context, grpc_session(context)
        )
        return grpc_groups.offset_commit_response(answer)

    async def ListGroups(
        self, request: pb.ListGroupsRequest, context: Context
    ) -> pb.ListGroupsResponse:
        answer = self._groups.list_groups(
            grpc_groups.list_groups_request(request), grpc_session(context)
        )
        return grpc_groups.list_groups_response(answer)

    async def DeleteGroup(
        self, request: pb.DeleteGroupRequest, context: Context
    ) -> pb.DeleteGroupResponse:
        answer = await self._groups.delete_group(
            grpc_groups.delete_group_request(request), grpc_session(context)
        )
        return grpc_groups.delete_group_response(answer)

    async def DescribeGroup(
        self, request: pb.DescribeGroupRequest, context: Context
    ) -> pb.DescribeGroupResponse:
        answer = self._groups.describe_group(
            grpc_groups.describe_group_request(request), grpc_session(context)
        )
        return grpc_groups.describe_group_response(answer)

    async def InitProducerId(
        self, request: pb.InitProducerIdRequest, context: Context
    ) -> pb.InitProducerIdResponse:
        answer = await self._producer_ids.init_producer_id(
            grpc_producers.init_producer_id_request(request), grpc_session(context)
        )
        return grpc_producers.init_producer_id_response(answer)

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
        answer = await (await self._txn(context)).add_partitions(
            grpc_txn.add_partitions_request(request), grpc_session(context)
        )
        return grpc_txn.add_partitions_response(answer)

    async def AddOffsetsToTxn(
        self, request: pb.AddOffsetsToTxnRequest, context: Context
    ) -> pb.TxnResponse:
        answer = await (await self._txn(context)).add_offsets(
            grpc_txn.add_offsets_request(request), grpc_session(context)
        )
        return grpc_txn.txn_response(answer)

    async def EndTxn(self, request: pb.EndTxnRequest, context: Context) -> pb.TxnResponse:
        answer = await (await self._txn(context)).end_txn(
            grpc_txn.end_txn_request(request), grpc_session(context)
        )
        return grpc_txn.txn_response(answer)

    async def DescribeTransactions(
        self, request: pb.DescribeTransactionsRequest, context: Context
    ) -> pb.DescribeTransactionsResponse:
        answer = (await self._txn(context)).describe(
            grpc_txn.describe_request(request), grpc_session(context)
        )
        return grpc_txn.describe_response(answer)

    async def ListTransactions(
        self, request: pb.ListTransactionsRequest, context: Context
    ) -> pb.ListTransactionsResponse:
        answer = (await self._txn(context)).listing(
            grpc_txn.list_request(request), grpc_session(context)
        )
        return grpc_txn.list_response(answer)

    async def DescribeProducers(
        self, request: pb.DescribeProducersRequest, context: Context
    ) -> pb.DescribeProducersResponse:
        if self._producers is None:
            await context.abort(
                grpc.StatusCode.UNIMPLEMENTED, "this broker serves no DescribeProducers"
            )
        assert self._producers is not None
        answer = self._producers.describe_producers(
            grpc_producers.describe_producers_request(request), grpc_session(context)
        )
        return grpc_producers.describe_producers_response(answer)

    # ACLs and SCRAM credentials; what a caller needs: security_admin.REQUIRED_ACCESS

    async def CreateAcls(
        self, request: pb.CreateAclsRequest, context: Context
    ) -> pb.CreateAclsResponse:
        security = await self._security_admin(context)
        answer = await security.create_acls(
            grpc_security.create_acls_request(request), grpc_session(context)
        )
        return grpc_security.create_acls_response(answer)

    async def DescribeAcls(
        self, request: pb.DescribeAclsRequest, context: Context
    ) -> pb.DescribeAclsResponse:
        security = await self._security_admin(context)
        answer = await security.describe_acls(
            grpc_security.describe_acls_request(request), grpc_session(context)
        )
        return grpc_security.describe_acls_response(answer)

    async def DeleteAcls(
        self, request: pb.DeleteAclsRequest, context: Context
    ) -> pb.DeleteAclsResponse:
        security = await self._security_admin(context)
        answer = await security.delete_acls(
            grpc_security.delete_acls_request(request), grpc_session(context)
        )
        return grpc_security.delete_acls_response(answer)

    async def DescribeUserScramCredentials(
        self, request: pb.DescribeUserScramCredentialsRequest, context: Context
    ) -> pb.DescribeUserScramCredentialsResponse:
        security = await self._security_admin(context)
        answer = await security.describe_user_scram_credentials(
            grpc_security.describe_scram_request(request), grpc_session(context)
        )
        return grpc_security.describe_scram_response(answer)

    async def AlterUserScramCredentials(
        self, request: pb.AlterUserScramCredentialsRequest, context: Context
    ) -> pb.AlterUserScramCredentialsResponse:
        security = await self._security_admin(context)
        answer = await security.alter_user_scram_credentials(
            grpc_security.alter_scram_request(request), grpc_session(context)
        )
        return grpc_security.alter_scram_response(answer)


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
