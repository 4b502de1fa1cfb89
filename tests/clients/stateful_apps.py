"""Stream processors with state in compacted changelog topics, against shardlog: a count per
key, the app killed with SIGKILL mid-stream, its local state deleted, the app restarted;
the counts must continue from the state restored from the changelog topic.

    python3 stateful_apps.py quixstreams|faust         # the driver (needs BOOTSTRAP)
    python3 stateful_apps.py app quixstreams|faust DIR RUN_ID   # the app itself

The app emits (key, count) to an output topic after each input record. Lost state would
restart a key's count at 1. quixstreams (at-least-once) applies a changelog record only if
the input offset it came from was committed, so its last counts are exact; faust restores
the whole changelog and then reprocesses the input records after its last commit, so its
last counts may exceed the number of input records (the overshoot is printed).
"""
import json, os, shutil, signal, subprocess, sys, tempfile, time, uuid

bootstrap = os.environ["BOOTSTRAP"]
KEYS, PER_KEY = 10, 300


def run_quixstreams(state_dir, run_id):
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


def run_faust(state_dir, run_id):
    import asyncio
    import faust
    # In-memory tables: every start restores the table from its changelog topic.
    app = faust.App(f"counter-{run_id}", broker=f"kafka://{bootstrap}", store="memory://",
                    datadir=state_dir, topic_partitions=1, web_enabled=False,
                    broker_commit_interval=0.5)
    words = app.topic(f"words-{run_id}", key_type=str, value_type=str)
    output = app.topic(f"counts-{run_id}", key_type=str, value_serializer="raw")
    counts = app.Table("counts", default=int, partitions=1)

    @app.agent(words)
    async def count(stream):
        async for key, _ in stream.items():
            counts[key] += 1
            await output.send(key=key, value=json.dumps({"count": counts[key]}).encode())
            await asyncio.sleep(0.002)

    sys.argv = [sys.argv[0], "worker", "-l", "warn"]
    app.main()


def main(framework):
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
    app = [sys.executable, __file__, "app", framework, state_dir, run_id]
    first = subprocess.Popen(app, stdout=subprocess.DEVNULL)
    try:
        read_until(lambda: len(seen) >= KEYS * PER_KEY // 3, 120)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    before_kill = len(seen)
    # No local state: the restarted app must rebuild it from the changelog topic.
    shutil.rmtree(state_dir, ignore_errors=True)

    admin = AdminClient({"bootstrap.servers": bootstrap})
    changelogs = [t for t in admin.list_topics(timeout=10).topics
                  if "changelog" in t and run_id in t]
    assert changelogs, "no changelog topic was created"
    resource = ConfigResource(ConfigResource.Type.TOPIC, changelogs[0])
    policy = admin.describe_configs([resource])[resource].result(10)["cleanup.policy"].value
    assert "compact" in policy, f"{changelogs[0]}: cleanup.policy={policy}"

    second = subprocess.Popen(app, stdout=subprocess.DEVNULL)
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
        try:
            second.wait(30)
        except subprocess.TimeoutExpired:
            second.kill()
        consumer.close()
        shutil.rmtree(work, ignore_errors=True)

    final = last_counts()
    after = seen[before_kill:]
    restarted_at_one = [k for k in final if (k, 1) in after]
    assert not restarted_at_one, f"state lost for {restarted_at_one}: counts restarted at 1"
    if framework == "quixstreams":
        assert all(v == PER_KEY for v in final.values()), f"final counts {final}"
    else:
        assert all(v >= PER_KEY for v in final.values()), f"final counts {final}"
    first_after = {}
    for key, c in after:
        first_after.setdefault(key, c)
    version = __import__(framework).__version__
    print(f"{framework} {version} ok: {KEYS * PER_KEY} records, killed after {before_kill} "
          f"outputs, state restored from {changelogs[0]} (cleanup.policy={policy}); first "
          f"counts after restart {sorted(first_after.values())}, final counts "
          f"{sorted(set(final.values()))} (input: {PER_KEY} a key)")


if __name__ == "__main__":
    if sys.argv[1] == "app":
        framework, state_dir, run_id = sys.argv[2:5]
        {"quixstreams": run_quixstreams, "faust": run_faust}[framework](state_dir, run_id)
    else:
        main(sys.argv[1])
