// A KafkaJS member of a broker-coordinated consumer group, for tests/interop/test_group_members.py.
//
// Usage: node kafkajs_member.js BOOTSTRAP GROUP TOPIC SESSION_TIMEOUT_MS
//
// Prints one JSON line per event on stdout: {"assigned": [partitions]} after each join, and
// {"records": [[partition, offset], ...]} for a batch whose commit (in its generation) succeeded.
// A batch whose commit is refused is not printed and is thrown back, so KafkaJS restarts from the
// group's committed offsets.  KafkaJS 2.2 names its round-robin assignor "RoundRobinAssigner"; the
// same assignor is offered here under the name Kafka's clients use, "roundrobin", so that the
// group's members share a protocol.
'use strict'

const { Kafka, logLevel, PartitionAssigners } = require('kafkajs')

const [bootstrap, group, topic, sessionMs] = process.argv.slice(2)
const print = (event) => process.stdout.write(JSON.stringify(event) + '\n')

const roundRobin = ({ cluster }) => ({ ...PartitionAssigners.roundRobin({ cluster }), name: 'roundrobin' })

async function main () {
  const kafka = new Kafka({ clientId: 'kafkajs-member', brokers: [bootstrap], logLevel: logLevel.NOTHING })
  const consumer = kafka.consumer({
    groupId: group,
    sessionTimeout: Number(sessionMs),
    heartbeatInterval: 1000,
    maxWaitTimeInMs: 100,
    partitionAssigners: [roundRobin]
  })
  consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
    print({ assigned: (payload.memberAssignment[topic] || []).slice().sort((a, b) => a - b) })
  })
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  await consumer.run({
    autoCommit: false,
    eachBatch: async ({ batch, isStale }) => {
      if (isStale() || batch.messages.length === 0) return
      const last = batch.messages[batch.messages.length - 1].offset
      await consumer.commitOffsets([
        { topic: batch.topic, partition: batch.partition, offset: (BigInt(last) + 1n).toString() }
      ])
      print({ records: batch.messages.map((m) => [batch.partition, Number(m.offset)]) })
    }
  })
  print({ ready: true })
}

main().catch((error) => {
  process.stderr.write(`kafkajs member failed: ${error.stack || error}\n`)
  process.exit(1)
})
