// The Node peer of bench/side_by_side.py: bbc/sqs-consumer with a no-op handler.
//
//   BENCH_ENDPOINT=http://127.0.0.1:PORT BENCH_QUEUE_URL=... BENCH_MESSAGES=N \
//   BENCH_MODE=message|batch node consumer.mjs
//
// message: `handleMessage` per message (sqs-consumer runs the batch's handlers together and
// deletes each message with its own DeleteMessage); batch: `handleMessageBatch` (one
// DeleteMessageBatch per batch). Heartbeat on in both (heartbeatInterval < visibilityTimeout),
// which for short handlers never fires. Prints "ready" before the first poll and "done" once
// N messages were processed (handled and deleted), then exits.
import { SQSClient } from "@aws-sdk/client-sqs";
import { Consumer } from "sqs-consumer";

const env = process.env;
const mode = env.BENCH_MODE ?? "batch";
const expected = Number(env.BENCH_MESSAGES ?? "0");
const settings = {
  batchSize: Number(env.BENCH_BATCH_SIZE ?? "10"),
  visibilityTimeout: Number(env.BENCH_VISIBILITY_S ?? "30"),
  heartbeatInterval: Number(env.BENCH_HEARTBEAT_S ?? "10"),
  waitTimeSeconds: Number(env.BENCH_WAIT_S ?? "20"),
};
if (mode !== "message" && mode !== "batch") {
  console.error(`BENCH_MODE=${mode}: expected message or batch`);
  process.exit(2);
}

const sqs = new SQSClient({
  endpoint: env.BENCH_ENDPOINT,
  region: "us-east-1",
  credentials: { accessKeyId: "testing", secretAccessKey: "testing" },
});
const handlers =
  mode === "batch"
    ? { handleMessageBatch: async (messages) => messages }
    : { handleMessage: async (message) => message };
const consumer = Consumer.create({
  queueUrl: env.BENCH_QUEUE_URL,
  sqs,
  ...settings,
  ...handlers,
  strictReturn: true,
});

let processed = 0;
consumer.on("message_processed", () => {
  processed += 1;
  if (processed === expected) {
    console.log("done");
    consumer.stop();
    process.exit(0);
  }
});
for (const event of ["error", "processing_error", "timeout_error"]) {
  consumer.on(event, (error) => console.error(`${event}: ${error.message}`));
}
console.log("ready");
consumer.start();
