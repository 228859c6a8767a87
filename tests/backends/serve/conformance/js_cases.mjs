// Conformance cases driven by the AWS SDK for JavaScript v3: the one the benchmarks' Node
// peer installs (bench/peers, SQS's JSON protocol) or js-query/ (3.445.0, the query
// protocol). Usage:
//   node js_cases.mjs <endpoint url> <directory whose node_modules has the SDK>
// Prints one JSON object: {"cases": {name: {ok, detail}}, "contentTypes": [...]}, the content
// types of the requests the SDK sent (which protocol it spoke). The SDK checks the MD5 of
// every received body itself, so a wrong MD5 fails a case here.
import { createRequire } from "node:module";
import path from "node:path";

const [endpoint, peers] = process.argv.slice(2);
const require = createRequire(path.join(peers, "package.json"));
const sqs = require("@aws-sdk/client-sqs");

const client = new sqs.SQSClient({
  endpoint,
  region: "us-east-1",
  credentials: { accessKeyId: "testing", secretAccessKey: "testing" },
  maxAttempts: 1,
});
const contentTypes = new Set();
client.middlewareStack.add(
  (next) => async (args) => {
    contentTypes.add(String(args.request.headers["content-type"]).split(";")[0]);
    return next(args);
  },
  { step: "finalizeRequest", name: "recordContentType" },
);
const send = (Command, input) => client.send(new Command(input));
const unique = () => `js-${Math.random().toString(16).slice(2, 14)}`;
const ARN = "arn:aws:sqs:us-east-1:000000000000:";

function check(condition, detail) {
  if (!condition) throw new Error(`check failed: ${JSON.stringify(detail)}`);
}

async function errorOf(promise) {
  try {
    await promise;
  } catch (error) {
    return [error.name, error.$metadata?.httpStatusCode];
  }
  return null;
}

const cases = {
  async lifecycle() {
    const name = unique();
    const { QueueUrl } = await send(sqs.CreateQueueCommand, {
      QueueName: name,
      Attributes: { VisibilityTimeout: "40" },
    });
    const attributes = await send(sqs.GetQueueAttributesCommand, {
      QueueUrl,
      AttributeNames: ["All"],
    });
    check(attributes.Attributes.VisibilityTimeout === "40", attributes.Attributes);
    check(attributes.Attributes.SqsManagedSseEnabled === "true", attributes.Attributes);
    await send(sqs.DeleteQueueCommand, { QueueUrl });
    const error = await errorOf(send(sqs.GetQueueUrlCommand, { QueueName: name }));
    check(error?.[0] === "QueueDoesNotExist" && error[1] === 400, error);
  },
  async sendReceiveDelete() {
    const { QueueUrl } = await send(sqs.CreateQueueCommand, { QueueName: unique() });
    const body = "line\r\nnext <&> \u00e9\u{1f600}";
    const MessageAttributes = {
      s: { DataType: "String", StringValue: "v" },
      b: { DataType: "Binary", BinaryValue: new Uint8Array([0, 255]) },
    };
    const sent = await send(sqs.SendMessageCommand, { QueueUrl, MessageBody: body, MessageAttributes });
    const got = await send(sqs.ReceiveMessageCommand, {
      QueueUrl,
      MessageAttributeNames: ["All"],
      AttributeNames: ["All"],
    });
    const [message] = got.Messages;
    check(message.Body === body && message.MessageId === sent.MessageId, message);
    check(message.MessageAttributes.s.StringValue === "v", message.MessageAttributes);
    check(message.Attributes.ApproximateReceiveCount === "1", message.Attributes);
    await send(sqs.DeleteMessageCommand, { QueueUrl, ReceiptHandle: message.ReceiptHandle });
    await send(sqs.DeleteMessageCommand, { QueueUrl, ReceiptHandle: message.ReceiptHandle });
    const error = await errorOf(
      send(sqs.DeleteMessageCommand, { QueueUrl, ReceiptHandle: "never-issued" }),
    );
    check(error?.[0] === "ReceiptHandleIsInvalid" && error[1] === 404, error);
  },
  async batchPartialFailure() {
    const { QueueUrl } = await send(sqs.CreateQueueCommand, { QueueName: unique() });
    const sent = await send(sqs.SendMessageBatchCommand, {
      QueueUrl,
      Entries: [
        { Id: "a", MessageBody: "a" },
        { Id: "b", MessageBody: "b", DelaySeconds: 901 },
      ],
    });
    check(sent.Successful.map((e) => e.Id).join() === "a", sent);
    check(sent.Failed[0].Id === "b" && sent.Failed[0].Code === "InvalidParameterValue", sent);
    const error = await errorOf(send(sqs.SendMessageBatchCommand, { QueueUrl, Entries: [] }));
    check(error?.[0] === "EmptyBatchRequest" && error[1] === 400, error);
  },
  async sizeLimit() {
    const { QueueUrl } = await send(sqs.CreateQueueCommand, {
      QueueName: unique(),
      Attributes: { MaximumMessageSize: "1024" },
    });
    const error = await errorOf(
      send(sqs.SendMessageCommand, { QueueUrl, MessageBody: "x".repeat(1025) }),
    );
    check(error?.[0] === "InvalidParameterValue" && error[1] === 400, error);
  },
  async fifoAttempt() {
    const { QueueUrl } = await send(sqs.CreateQueueCommand, {
      QueueName: `${unique()}.fifo`,
      Attributes: { FifoQueue: "true", ContentBasedDeduplication: "true" },
    });
    await send(sqs.SendMessageCommand, { QueueUrl, MessageBody: "a", MessageGroupId: "g" });
    const input = { QueueUrl, ReceiveRequestAttemptId: "try-1" };
    const first = await send(sqs.ReceiveMessageCommand, input);
    const again = await send(sqs.ReceiveMessageCommand, input);
    check(first.Messages[0].ReceiptHandle === again.Messages[0].ReceiptHandle, [first, again]);
    const long = await errorOf(
      send(sqs.ReceiveMessageCommand, { QueueUrl, ReceiveRequestAttemptId: "a".repeat(129) }),
    );
    check(long?.[0] === "InvalidParameterValue" && long[1] === 400, long);
    const missing = await errorOf(send(sqs.SendMessageCommand, { QueueUrl, MessageBody: "b" }));
    check(missing?.[0] === "MissingParameter" && missing[1] === 400, missing);
  },
  async tags() {
    const { QueueUrl } = await send(sqs.CreateQueueCommand, {
      QueueName: unique(),
      tags: { team: "a" },
    });
    await send(sqs.TagQueueCommand, { QueueUrl, Tags: { env: "x" } });
    await send(sqs.UntagQueueCommand, { QueueUrl, TagKeys: ["team"] });
    const { Tags } = await send(sqs.ListQueueTagsCommand, { QueueUrl });
    check(JSON.stringify(Tags) === '{"env":"x"}', Tags);
  },
  async moveBack() {
    const name = unique();
    const dlq = (await send(sqs.CreateQueueCommand, { QueueName: `${name}-dlq` })).QueueUrl;
    const policy = JSON.stringify({ deadLetterTargetArn: `${ARN}${name}-dlq`, maxReceiveCount: 1 });
    const source = (
      await send(sqs.CreateQueueCommand, { QueueName: name, Attributes: { RedrivePolicy: policy } })
    ).QueueUrl;
    const sent = await send(sqs.SendMessageCommand, { QueueUrl: source, MessageBody: "m" });
    await send(sqs.ReceiveMessageCommand, { QueueUrl: source, VisibilityTimeout: 0 });
    await send(sqs.ReceiveMessageCommand, { QueueUrl: source });
    const sources = await send(sqs.ListDeadLetterSourceQueuesCommand, { QueueUrl: dlq });
    check(sources.queueUrls.join() === source, sources);
    await send(sqs.StartMessageMoveTaskCommand, { SourceArn: `${ARN}${name}-dlq` });
    const tasks = await send(sqs.ListMessageMoveTasksCommand, { SourceArn: `${ARN}${name}-dlq` });
    check(tasks.Results[0].Status === "COMPLETED", tasks);
    check(tasks.Results[0].ApproximateNumberOfMessagesMoved === 1, tasks);
    const back = await send(sqs.ReceiveMessageCommand, { QueueUrl: source });
    check(back.Messages[0].Body === "m" && back.Messages[0].MessageId !== sent.MessageId, back);
  },
};

const results = {};
for (const [name, run] of Object.entries(cases)) {
  try {
    await run();
    results[name] = { ok: true, detail: "" };
  } catch (error) {
    results[name] = { ok: false, detail: String(error?.stack ?? error).slice(0, 800) };
  }
}
console.log(JSON.stringify({ cases: results, contentTypes: [...contentTypes].sort() }));
