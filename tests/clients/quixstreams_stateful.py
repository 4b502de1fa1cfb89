"""quixstreams (stateful, with a compacted changelog topic) against shardlog: count per key,
kill -9 the app mid-stream, delete its local state, restart it, and check that the counts
continue from the state restored from the changelog topic.

    python3 quixstreams_stateful.py            # the driver (needs BOOTSTRAP)
    python3 quixstreams_stateful.py app DIR    # the app itself, state in DIR

The app emits (key, count) to an output topic after each input record. With the state
restored from the changelog the last count of every key equals the number of input records
of that key; lost state would restart a key's count at 1, and a state change applied
twice would push it past the total. Quix's at-least-once recovery keeps this exact: it
applies a changelog record only if the input offset it came from was committed.
"""
import json, os, shutil, signal, subprocess, sys, tempfile, time, uuid

bootstrap = os.environ["BOOTSTRAP"]
KEYS, PER_KEY = 10, 300


def run_app(state_dir, run_id):
    from quixstreams import Application
    app = Application(broker_address=bootstrap, consumer_group=f"counter-{run_id}",
                      auto_offset_reset="earliest", state_dir=state_dir, commit_interval=0.5,
                      loglevel="WARNING")
    words = app.topic(f"words-{run_id}", value_deserializer="json")
    counts = app.topic(f"counts-{run_id}", value_serializer="json")

    def count(value, state):
        total = state.get("count", 0) + 1
        state.set("count", total)
        time.sleep(0.002)  # slow enough to be killed mid-stream
        return {"count": total}

    app.dataframe(words).apply(count, stateful=True).to_topic(counts)
    app.run()


def main():
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, ConfigResource
    run_id = uuid.uuid4().hex[:8]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(KEYS * PER_KEY):
        producer.produce(f"words-{run_id}", key=f"k{i % KEYS}", value=json.dumps({"i": i}))
    producer.flush(30)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{run_id}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([f"counts-{run_id}"])
    seen = []  # (key, count) in output order

    def read_until(done, limit_s, what="outputs"):
        end = time.time() + limit_s
        while not done():
            assert time.time() < end, f"timed out waiting for {what}: {len(seen)} outputs"
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.append((msg.key().decode(), json.loads(msg.value())["count"]))

    def last_counts():
        last = {}
        for key, c in seen:
            last[key] = max(last.get(key, 0), c)
        return last

    work = tempfile.mkdtemp()
    state_dir = os.path.join(work, "state")
    app = [sys.executable, __file__, "app", state_dir, run_id]
    first = subprocess.Popen(app)
    read_until(lambda: len(seen) >= KEYS * PER_KEY // 3, 120)
    first.send_signal(signal.SIGKILL)
    first.wait()
    before_kill = len(seen)
    # No local state: the restarted app must rebuild it from the changelog topic.
    shutil.rmtree(state_dir)

    admin = AdminClient({"bootstrap.servers": bootstrap})
    changelogs = [t for t in admin.list_topics(timeout=10).topics if t.startswith("changelog")
                  and run_id in t]
    assert changelogs, "no changelog topic was created"
    resource = ConfigResource(ConfigResource.Type.TOPIC, changelogs[0])
    policy = admin.describe_configs([resource])[resource].result(10)["cleanup.policy"].value
    assert "compact" in policy, f"{changelogs[0]}: cleanup.policy={policy}"

    second = subprocess.Popen(app)
    try:
        def complete():
            last = last_counts()
            return all(last.get(f"k{k}", 0) >= PER_KEY for k in range(KEYS))
        read_until(complete, 180, "every key's final count")
        # Anything still coming would show a double count.
        quiet_until = time.time() + 3
        read_until(lambda: time.time() > quiet_until, 10)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(30)
        consumer.close()
        shutil.rmtree(work, ignore_errors=True)

    final = last_counts()
    assert all(v == PER_KEY for v in final.values()), f"final counts {final}"
    after = seen[before_kill:]
    restarted_at_one = [k for k in final if (k, 1) in after]
    assert not restarted_at_one, f"state lost for {restarted_at_one}: counts restarted at 1"
    first_after = {}
    for key, c in after:
        first_after.setdefault(key, c)
    print(f"quixstreams {__import__('quixstreams').__version__} ok: {KEYS * PER_KEY} records, "
          f"killed after {before_kill} outputs, state restored from {changelogs[0]} "
          f"(cleanup.policy={policy}); first counts after restart {sorted(first_after.values())}, "
          f"every key ends at {PER_KEY}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "app":
        run_app(sys.argv[2], sys.argv[3])
    else:
        main()
