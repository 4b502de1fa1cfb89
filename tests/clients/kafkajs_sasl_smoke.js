// kafkajs over SASL_PLAINTEXT: produce and consume in a group as a user made with
// `shardlog user create`, mechanism from SASL_MECHANISM (kafkajs: scram-sha-256,
// scram-sha-512, plain); with CHECK_WRONG_PASSWORD=1, a wrong password must not get in. run.sh sets SASL_BOOTSTRAP,
// SASL_USER, SASL_PASSWORD.
const { Kafka, logLevel } = require('kafkajs')
const mechanism = process.env.SASL_MECHANISM.toLowerCase()
const topic = `sasl-kafkajs-${mechanism}`
const client = (password) => new Kafka({
  brokers: [process.env.SASL_BOOTSTRAP], logLevel: logLevel.NOTHING,
  sasl: { mechanism, username: process.env.SASL_USER, password },
  retry: { retries: 2 }
})
async function main() {
  const kafka = client(process.env.SASL_PASSWORD)
  const producer = kafka.producer(); await producer.connect()
  await producer.send({ topic, acks: -1, messages: Array.from({ length: 20 }, (_, i) => ({ value: `v${i}` })) })
  await producer.disconnect()
  const consumer = kafka.consumer({ groupId: `${topic}-g` }); await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  let n = 0
  await new Promise((resolve) => {
    consumer.run({ eachMessage: async () => { n++; if (n >= 20) resolve() } })
    setTimeout(resolve, 20000)
  })
  await consumer.disconnect()
  let refused = null
  if (process.env.CHECK_WRONG_PASSWORD === '1') {
    const wrong = client('wrong-password').producer()
    refused = false
    try { await wrong.connect() } catch (e) { refused = e.name === 'KafkaJSSASLAuthenticationError' }
  }
  const checked = refused === null ? '' : ` wrong_password_refused=${refused}`
  console.log(`kafkajs ${mechanism} over SASL_PLAINTEXT consumed=${n}${checked}`)
  process.exit(n === 20 && refused !== false ? 0 : 1)
}
main().catch((e) => { console.error('kafkajs over SASL failed', e); process.exit(1) })
