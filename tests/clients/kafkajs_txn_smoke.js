// kafkajs transactions: one committed (with the consumer offsets of a consume-transform-
// produce step), one aborted; a read_committed consumer must see exactly the committed.
const { Kafka, logLevel } = require('kafkajs')
const kafka = new Kafka({ brokers: [process.env.BOOTSTRAP], logLevel: logLevel.WARN })
async function consumeAll(groupId, topic, expected) {
  const consumer = kafka.consumer({ groupId, readUncommitted: false })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const seen = []
  await new Promise((resolve) => {
    consumer.run({ eachMessage: async ({ message }) => { seen.push(message.value.toString()); if (seen.length >= expected) resolve() } })
    setTimeout(resolve, 15000)
  })
  // A moment more: an aborted record delivered late would show here.
  await new Promise((r) => setTimeout(r, 1000))
  await consumer.disconnect()
  return seen
}
async function main() {
  const admin = kafka.admin(); await admin.connect()
  await admin.createTopics({ topics: [{ topic: 'kjs-txin', numPartitions: 1 }, { topic: 'kjs-txout', numPartitions: 1 }] })
  await admin.disconnect()
  const plain = kafka.producer({ idempotent: true }); await plain.connect()
  await plain.send({ topic: 'kjs-txin', acks: -1, messages: [{ value: 'a' }, { value: 'b' }, { value: 'c' }] })
  await plain.disconnect()

  const producer = kafka.producer({ transactionalId: 'kjs-tx-1', idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  // Committed: the input transformed, with the input's offsets.
  const committed = await producer.transaction()
  await committed.send({ topic: 'kjs-txout', messages: ['a', 'b', 'c'].map((v) => ({ value: 'out-' + v })) })
  await committed.sendOffsets({ consumerGroupId: 'kjs-pipe', topics: [{ topic: 'kjs-txin', partitions: [{ partition: 0, offset: '3' }] }] })
  await committed.commit()
  // Aborted: neither the records nor anything else stays.
  const aborted = await producer.transaction()
  await aborted.send({ topic: 'kjs-txout', messages: [{ value: 'aborted-1' }, { value: 'aborted-2' }] })
  await aborted.abort()
  await producer.disconnect()

  const seen = await consumeAll('kjs-txcheck', 'kjs-txout', 3)
  const admin2 = kafka.admin(); await admin2.connect()
  const offsets = await admin2.fetchOffsets({ groupId: 'kjs-pipe', topics: ['kjs-txin'] })
  await admin2.disconnect()
  const offset = offsets[0].partitions[0].offset
  const ok = JSON.stringify(seen) === JSON.stringify(['out-a', 'out-b', 'out-c']) && offset === '3'
  console.log(`kafkajs transactions: read_committed saw ${JSON.stringify(seen)}, pipe offset ${offset}`)
  process.exit(ok ? 0 : 1)
}
main().catch((e) => { console.error('kafkajs transactions failed', e); process.exit(1) })
