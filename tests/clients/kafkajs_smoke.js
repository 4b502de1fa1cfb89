const { Kafka, logLevel } = require('kafkajs')
const kafka = new Kafka({ brokers: [process.env.BOOTSTRAP], logLevel: logLevel.WARN })
async function main() {
  const admin = kafka.admin(); await admin.connect()
  await admin.createTopics({ topics: [{ topic: 'kjs', numPartitions: 2 }] })
  await admin.disconnect()
  const producer = kafka.producer({ idempotent: true }); await producer.connect()
  await producer.send({ topic: 'kjs', acks: -1, messages: Array.from({ length: 40 }, (_, i) => ({ key: `k${i % 4}`, value: `v${i}` })) })
  await producer.disconnect()
  const consumer = kafka.consumer({ groupId: 'kjsg' }); await consumer.connect()
  await consumer.subscribe({ topic: 'kjs', fromBeginning: true })
  let n = 0
  await new Promise((resolve) => {
    consumer.run({ eachMessage: async () => { n++; if (n >= 40) resolve() } })
    setTimeout(resolve, 20000)
  })
  await consumer.disconnect()
  console.log('kafkajs consumed=' + n); process.exit(n === 40 ? 0 : 1)
}
main().catch((e) => { console.error('kafkajs failed', e); process.exit(1) })
