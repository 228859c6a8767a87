"""`DynamoDBStore`: idempotency records in a DynamoDB table, through aiobotocore.

Optional extra: `pip install 'lease-worker[dynamodb]'`. Table schema: one string partition
key `pk`, no sort key; turn on TTL on the number attribute `ttl` (epoch seconds) to have
DynamoDB drop expired records (garbage collection only: the answers come from the times in
the records). Records are items `pk = "key#<key>"`, heartbeats `pk = "owner#<owner>"`.
IAM actions: dynamodb:PutItem, dynamodb:GetItem, dynamodb:DeleteItem on the table
(dynamodb:CreateTable, dynamodb:DescribeTable and dynamodb:UpdateTimeToLive for
`create_table`).

Each operation is one conditional write; a refused claim costs a strongly consistent read
after it (moto's server does not return the old item with a failed condition).
"""

from __future__ import annotations

import math
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from worker.idempotency.record import GC_SLACK_S, Record, RecordState
from worker.idempotency.store import StoreError

__all__ = ["DynamoDBStore", "create_table"]

_CONDITION_FAILED = "ConditionalCheckFailedException"
_ERRORS = (ClientError, BotoCoreError, OSError)


class DynamoDBStore:
    """An `IdempotencyStore` on a DynamoDB table. `client`: an aiobotocore DynamoDB client,
    owned by the caller (opened and closed around the worker, e.g. in a start-up hook)."""

    def __init__(self, client: Any, table: str) -> None:
        self._client = client
        self._table = table

    async def create(self, record: Record, *, now: float) -> Record | None:
        for _ in range(3):  # the record in the way may expire or vanish before it is read
            condition = "attribute_not_exists(pk) OR (#s = :done AND expires_at <= :now)"
            values = {":done": {"S": RecordState.COMPLETED.value}, ":now": _n(now)}
            if await self._put("create", _item(record), condition, values):
                return None
            found = await self._get("create", f"key#{record.key}")
            if found is not None:
                current = _record(found)
                if current.state is RecordState.IN_PROGRESS or current.expires_at > now:
                    return current
        raise StoreError("create", "the record in the way kept changing")

    async def replace(self, record: Record, *, token: str) -> bool:
        return await self._put("replace", _item(record), "#t = :t", {":t": {"S": token}})

    async def remove(self, key: str, *, token: str) -> bool:
        try:
            await self._client.delete_item(
                TableName=self._table,
                Key={"pk": {"S": f"key#{key}"}},
                ConditionExpression="#t = :t",
                ExpressionAttributeNames={"#t": "token"},
                ExpressionAttributeValues={":t": {"S": token}},
            )
        except _ERRORS as error:
            if _code(error) == _CONDITION_FAILED:
                return False
            raise StoreError("remove", _reason(error)) from error
        return True

    async def beat(self, owner: str, *, until: float) -> None:
        item = {"pk": {"S": f"owner#{owner}"}, "beat_until": _n(until), "ttl": _ttl(until)}
        try:
            await self._client.put_item(TableName=self._table, Item=item)
        except _ERRORS as error:
            raise StoreError("beat", _reason(error)) from error

    async def beat_of(self, owner: str) -> float | None:
        found = await self._get("beat_of", f"owner#{owner}")
        return None if found is None else float(found["beat_until"]["N"])

    async def _put(
        self, operation: str, item: dict[str, Any], condition: str, values: dict[str, Any]
    ) -> bool:
        names = {"#s": "state", "#t": "token"}
        used = {name: value for name, value in names.items() if name in condition}
        try:
            await self._client.put_item(
                TableName=self._table,
                Item=item,
                ConditionExpression=condition,
                ExpressionAttributeNames=used,
                ExpressionAttributeValues=values,
            )
        except _ERRORS as error:
            if _code(error) == _CONDITION_FAILED:
                return False
            raise StoreError(operation, _reason(error)) from error
        return True

    async def _get(self, operation: str, pk: str) -> dict[str, Any] | None:
        try:
            answer = await self._client.get_item(
                TableName=self._table, Key={"pk": {"S": pk}}, ConsistentRead=True
            )
        except _ERRORS as error:
            raise StoreError(operation, _reason(error)) from error
        item: dict[str, Any] | None = answer.get("Item")
        return item


async def create_table(client: Any, table: str) -> None:
    """Create the table this store needs (on-demand billing) with TTL on `ttl`; waits until
    it is active. For tests and first set-up; production tables belong in infrastructure."""
    await client.create_table(
        TableName=table,
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    waiter = client.get_waiter("table_exists")
    await waiter.wait(TableName=table, WaiterConfig={"Delay": 1, "MaxAttempts": 30})
    await client.update_time_to_live(
        TableName=table, TimeToLiveSpecification={"Enabled": True, "AttributeName": "ttl"}
    )


def _item(record: Record) -> dict[str, Any]:
    item: dict[str, Any] = {
        "pk": {"S": f"key#{record.key}"},
        "key": {"S": record.key},
        "token": {"S": record.token},
        "state": {"S": record.state.value},
        "owner": {"S": record.owner},
        "stale_at": _n(record.stale_at),
        "expires_at": _n(record.expires_at),
        "ttl": _ttl(max(record.expires_at, record.stale_at)),
    }
    if record.body_hash is not None:
        item["body_hash"] = {"S": record.body_hash}
    if record.result is not None:
        item["result"] = {"S": record.result}
    return item


def _record(item: dict[str, Any]) -> Record:
    return Record(
        key=item["key"]["S"],
        token=item["token"]["S"],
        state=RecordState(item["state"]["S"]),
        owner=item["owner"]["S"],
        stale_at=float(item["stale_at"]["N"]),
        expires_at=float(item["expires_at"]["N"]),
        body_hash=item["body_hash"]["S"] if "body_hash" in item else None,
        result=item["result"]["S"] if "result" in item else None,
    )


def _n(value: float) -> dict[str, str]:
    return {"N": repr(value)}


def _ttl(at: float) -> dict[str, str]:
    return {"N": str(math.ceil(at + GC_SLACK_S))}


def _code(error: BaseException) -> str:
    if isinstance(error, ClientError):
        return str(error.response.get("Error", {}).get("Code", ""))
    return ""


def _reason(error: BaseException) -> str:
    # The code only: a message could quote the item, which holds a business key.
    return _code(error) or type(error).__name__
