"""SQS's JSON protocol, as pure functions: request members in, engine values out, and back.

No HTTP and no engine calls here (`backends.sqs_endpoint` and `backends._sqs_service` make
them). The protocol is four modules, each with the rules it keeps; this one gathers their
names for the endpoint:

- `backends._sqs_json_members`: reading request members, and refusing them;
- `backends._sqs_json_errors`: `SqsError`, SQS's JSON error answer, a batch entry's failure;
- `backends._sqs_json_messages`: messages, their attributes and MD5s;
- `backends._sqs_json_queue_attributes`: queue attributes, given and reported.
"""

from __future__ import annotations

from backends._sqs_json_errors import SqsError, entry_failure_to_wire, render_error
from backends._sqs_json_members import (
    entries,
    entry_id,
    integer,
    invalid,
    mapping,
    missing,
    required_string,
    string,
    string_list,
)
from backends._sqs_json_messages import (
    AttributeFilter,
    md5_of_body,
    md5_of_message_attributes,
    message_attribute_filter,
    message_attributes_from_wire,
    message_to_wire,
    outgoing_message,
    sent_to_wire,
    system_attribute_filter,
    system_attributes_md5,
)
from backends._sqs_json_queue_attributes import (
    QUEUE_ATTRIBUTE_NAMES,
    QueueSettings,
    check_same,
    create_fields,
    queue_attributes_to_wire,
    queue_settings,
)

__all__ = [
    "QUEUE_ATTRIBUTE_NAMES",
    "AttributeFilter",
    "QueueSettings",
    "SqsError",
    "check_same",
    "create_fields",
    "entries",
    "entry_failure_to_wire",
    "entry_id",
    "integer",
    "invalid",
    "mapping",
    "md5_of_body",
    "md5_of_message_attributes",
    "message_attribute_filter",
    "message_attributes_from_wire",
    "message_to_wire",
    "missing",
    "outgoing_message",
    "queue_attributes_to_wire",
    "queue_settings",
    "render_error",
    "required_string",
    "sent_to_wire",
    "string",
    "string_list",
    "system_attribute_filter",
    "system_attributes_md5",
]
