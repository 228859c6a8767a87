# send.py
import sys

from backends.sqs import SqsBackend, SqsSettings
from worker import SyncProducer


async def connect() -> SqsBackend:
    # Region, endpoint and keys come from the environment, as for any AWS client.
    return await SqsBackend.connect(SqsSettings())


def main(count: int) -> None:
    with SyncProducer(connect) as producer:
        for n in range(count):
            producer.send("orders", {"id": 100 + n, "work_s": 2})
    print(f"sent {count} orders")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
