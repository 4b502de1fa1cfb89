"""aiokafka: idempotent producer, group consumer, commit."""
import asyncio, os, sys
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

bootstrap = os.environ["BOOTSTRAP"]

async def main():
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
    await p.start()
    for i in range(30):
        await p.send_and_wait("aio", f"v{i}".encode(), key=b"k")
    await p.stop()
    c = AIOKafkaConsumer("aio", bootstrap_servers=bootstrap, group_id="aiog",
                         auto_offset_reset="earliest", enable_auto_commit=False)
    await c.start()
    n = 0
    try:
        while n < 30:
            batch = await asyncio.wait_for(c.getmany(timeout_ms=1000), 20)
            n += sum(len(m) for m in batch.values())
        await c.commit()
    finally:
        await c.stop()
    return n

n = asyncio.run(main())
print(f"aiokafka consumed={n}")
sys.exit(0 if n == 30 else 1)
