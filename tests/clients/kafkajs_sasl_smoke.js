// kafkajs over a secured listener: produce and consume in a group. SECURITY_PROTOCOL is
// SASL_PLAINTEXT (the default), SASL_SSL or SSL; SASL logs in as a user made with
// `shardlog user create`, mechanism from SASL_MECHANISM (kafkajs: scram-sha-256,
// scram-sha-512, plain); TLS trusts SSL_CA and, with SSL_CERT and SSL_KEY, presents a client
// certificate. With CHECK_WRONG_PASSWORD=1 a wrong password (SASL) or a missing certificate
// (SSL) must not get in. run.sh sets SECURE_BOOTSTRAP, SASL_USER, SASL_PASSWORD and the rest.
const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')
const protocol = process.env.SECURITY_PROTOCOL || 'SASL_PLAINTEXT'
const useSasl = protocol.startsWith('SASL')
const useTls = protocol.endsWith('SSL')
const mechanism = useSasl ? process.env.SASL_MECHANISM.toLowerCase() : 'cert'
const topic = `${protocol.toLowerCase()}-kafkajs-${mechanism}`
const client = (wrong) => {
  const settings = { brokers: [process.env.SECURE_BOOTSTRAP], logLevel: logLevel.NOTHING, retry: { retries: 2 } }
  if (useSasl) {
    const password = wrong ? 'wrong-password' : process.env.SASL_PASSWORD
    settings.sasl = { mechanism, username: process.env.SASL_USER, password }
  }
  if (useTls) {
    settings.ssl = { ca: [fs.readFileSync(process.env.SSL_CA)] }
    if (process.env.SSL_CERT && !(wrong && !useSasl)) {
      settings.ssl.cert = fs.readFileSync(process.env.SSL_CERT)
      settings.ssl.key = fs.readFileSync(process.env.SSL_KEY)
    }
  }
  return new Kafka(settings)
}
async function main() {
  const kafka = client(false)
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
    const wrong = client(true).producer()
    refused = false
    try { await wrong.connect() } catch (e) {
      // SASL: an authentication error; SSL without a certificate: the connection fails.
      refused = useSasl ? e.name === 'KafkaJSSASLAuthenticationError' : true
      console.log(`kafkajs refused: ${e.name}: ${e.message}`)
    }
  }
  const what = useSasl ? 'wrong_password_refused' : 'no_certificate_refused'
  const checked = refused === null ? '' : ` ${what}=${refused}`
  console.log(`kafkajs ${mechanism} over ${protocol} consumed=${n}${checked}`)
  process.exit(n === 20 && refused !== false ? 0 : 1)
}
main().catch((e) => { console.error(`kafkajs over ${protocol} failed`, e); process.exit(1) })
