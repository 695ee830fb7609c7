// kafkajs against FMQ's Kafka door: creates a topic, produces records with binary keys,
// headers and a null value (acks=all), reads them back through a consumer group, and
// prints what it read as one JSON line (bytes in base64). tests/kafka/test_kafkajs.py runs
// it and checks every byte. Usage: node roundtrip.js BOOTSTRAP TOPIC GROUP
"use strict";
const { Kafka, logLevel } = require("kafkajs");

const [bootstrap, topic, groupId] = process.argv.slice(2);
const b64 = (buf) => (buf === null || buf === undefined ? null : Buffer.from(buf).toString("base64"));

const RECORDS = [
  { key: Buffer.from("order-1"), value: Buffer.from("paid"),
    headers: { bin: Buffer.from([0, 255, 1]), text: Buffer.from("çé") } },
  { key: null, value: Buffer.from("no key"), headers: {} },
  { key: Buffer.from("tombstone"), value: null, headers: {} },
  { key: Buffer.from("empty"), value: Buffer.alloc(0), headers: { h: Buffer.alloc(0) } },
  { key: Buffer.from("big"), value: Buffer.alloc(70000, 7), headers: {} },
];

async function main() {
  const kafka = new Kafka({ clientId: "fmq-kafkajs", brokers: [bootstrap], logLevel: logLevel.ERROR,
                            retry: { retries: 10 } });
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 2 }], waitForLeaders: true });
  await admin.disconnect();

  const producer = kafka.producer();
  await producer.connect();
  const sent = await producer.send({ topic, acks: -1,
    messages: RECORDS.map((r) => ({ ...r, partition: 0 })) });
  await producer.disconnect();

  const consumer = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 1000 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const read = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`read ${read.length} of ${RECORDS.length} within 60 s`)), 60000);
    consumer.run({
      eachMessage: async ({ partition, message }) => {
        const headers = {};
        for (const [name, value] of Object.entries(message.headers || {})) headers[name] = b64(value);
        read.push({ partition, offset: Number(message.offset), key: b64(message.key),
                    value: b64(message.value), headers });
        if (read.length >= RECORDS.length) { clearTimeout(timer); resolve(); }
      },
    }).catch(reject);
  });
  await consumer.disconnect();
  const committed = await (async () => {
    const a = kafka.admin();
    await a.connect();
    const offsets = await a.fetchOffsets({ groupId, topics: [topic] });
    await a.disconnect();
    return offsets[0].partitions.map((p) => ({ partition: p.partition, offset: Number(p.offset) }));
  })();
  return JSON.stringify({ sent: sent.map((s) => ({ partition: s.partition, baseOffset: Number(s.baseOffset) })),
                          read, committed });
}

// The report is written before the exit: on a pipe, console.log would still be under way.
main().then((report) => process.stdout.write(report + "\n", () => process.exit(0)),
            (err) => { console.error((err && err.stack) || err); process.exit(1); });
