"""What `max_bytes` counts for a held message, and how receives are sized under it (pure)."""

from __future__ import annotations

import sys
from types import MappingProxyType

from worker.core.byte_budget import ByteBudget, message_bytes
from worker.core.lease import Lease, LeaseState
from worker.types import MessageAttribute, ReceivedMessage


def _message(body: str, **attributes: MessageAttribute) -> ReceivedMessage:
    return ReceivedMessage(
        queue="jobs",
        message_id="m",
        receipt_handle="",
        body=body,
        receive_count=1,
        attributes=MappingProxyType({}),
        message_attributes=MappingProxyType(attributes),
    )


def _base() -> int:
    return message_bytes(_message(""), decoded=False) - sys.getsizeof("")


def test_a_body_counts_what_python_stores_not_its_utf8_length() -> None:
    ascii_body, emoji_body = "x" * 10_000, "x" * 9_999 + "\U0001f600"
    assert message_bytes(_message(ascii_body), decoded=False) - _base() == 10_049
    # One character beyond the BMP: the whole string takes 4 bytes a character (its UTF-8
    # is 10,002 bytes, which the old count went by).
    assert message_bytes(_message(emoji_body), decoded=False) - _base() > 40_000


def test_a_decoded_payload_counts_as_much_again_as_the_body() -> None:
    body = "x" * 10_000
    raw = message_bytes(_message(body), decoded=False)
    assert message_bytes(_message(body), decoded=True) - raw == sys.getsizeof(body)


def test_message_attributes_count_with_the_body() -> None:
    blob = MessageAttribute(data_type="Binary", binary_value=b"\0" * 5_000)
    text = MessageAttribute(data_type="String", string_value="y" * 3_000)
    bare = message_bytes(_message("{}"), decoded=False)
    assert message_bytes(_message("{}", blob=blob, text=text), decoded=False) - bare > 8_000


def test_with_nothing_seen_a_receive_asks_for_one_message() -> None:
    budget = ByteBudget(1_000_000)
    assert budget.receive_count(10, counted=0) == 1
    assert budget.ahead(1) == 0


def test_a_receive_asks_for_no_more_than_the_bytes_left_can_take() -> None:
    budget = ByteBudget(16 * 2**20)
    body = "x" * 2**20
    received = _message(body)
    counted = message_bytes(received, decoded=True)  # 2 MiB and a little
    budget.seen(counted, received)
    # While read, a message is counted with twice its body more (the answer, the parser's
    # copy): about 4 MiB. From nothing held: 16 // 4 = 3 (a bit over 4 MiB each), not 10.
    assert budget.largest == counted + 2 * sys.getsizeof(body)
    assert budget.receive_count(10, counted=0) == 3
    assert budget.receive_count(10, counted=8 * 2**20) == 1
    # Under the cap by less than one message: one still (at most one message past it).
    assert budget.receive_count(10, counted=16 * 2**20 - 1) == 1
    # Small messages: the reservation is the limit.
    small = ByteBudget(16 * 2**20)
    small.seen(1_000, _message("x" * 300))
    assert small.receive_count(10, counted=0) == 10
    assert small.ahead(10) == 10 * small.largest


def test_the_largest_message_seen_sizes_receives() -> None:
    budget = ByteBudget(100_000)
    big, small = _message("x" * 20_000), _message("x" * 100)
    budget.seen(message_bytes(big, decoded=False), big)
    budget.seen(message_bytes(small, decoded=False), small)
    assert budget.largest == message_bytes(big, decoded=False) + 2 * sys.getsizeof(big.body)
    assert budget.receive_count(10, counted=0) == 100_000 // budget.largest


def test_a_finished_lease_lets_go_of_its_message() -> None:
    """The lease keeper's heap drops a finished lease lazily: it must not keep the body."""
    finished: list[ReceivedMessage | None] = []
    received = _message("x" * 1000)
    lease = Lease(
        "jobs",
        "m",
        "h",
        0.0,
        30,
        3600,
        lambda: 0.0,
        on_finish=lambda lease: finished.append(lease.received),
        received=received,
    )
    lease.finish(LeaseState.DONE)
    assert finished == [received]  # the owner still reads it as the lease finishes
    assert lease.received is None
