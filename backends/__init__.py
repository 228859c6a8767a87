"""Queue backends: the in-memory engine (`backends.memory`) and Amazon SQS (`backends.sqs`)."""
