// kafkago_check: segmentio kafka-go (Debian's 0.2.1) against shardlog. That release sends
// fixed request versions without asking ApiVersions, and writes and reads message format
// v1 (Produce v2, Fetch v2), which shardlog refuses as Kafka 4.0 does (no record-format
// conversion; issue 20). What it can do is checked: CreateTopics v0, Metadata v1,
// ListOffsets v1. Produce must be refused (the run script checks the broker's log line).
// Exits non-zero with a message when any of that does not hold.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	kafka "github.com/segmentio/kafka-go"
)

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "FAIL kafka-go: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	bootstrap := flag.String("bootstrap", "127.0.0.1:9092", "broker")
	flag.Parse()
	topic := fmt.Sprintf("kafkago-%d", time.Now().UnixNano())

	conn, err := kafka.Dial("tcp", *bootstrap)
	if err != nil {
		fail("dial: %v", err)
	}
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	config := kafka.TopicConfig{Topic: topic, NumPartitions: 1, ReplicationFactor: 1}
	if err := conn.CreateTopics(config); err != nil {
		fail("create topic (CreateTopics v0): %v", err)
	}
	partitions, err := conn.ReadPartitions(topic)
	if err != nil || len(partitions) != 1 {
		fail("read partitions (Metadata v1): %v %v", partitions, err)
	}
	conn.Close()
	fmt.Println("ok kafka-go: CreateTopics v0 and Metadata v1")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leader, err := kafka.DialLeader(ctx, "tcp", *bootstrap, topic, 0)
	if err != nil {
		fail("dial leader: %v", err)
	}
	leader.SetDeadline(time.Now().Add(30 * time.Second))
	first, last, err := leader.ReadOffsets()
	if err != nil || first != 0 || last != 0 {
		fail("offsets of an empty partition (ListOffsets v1): %d %d %v", first, last, err)
	}
	fmt.Println("ok kafka-go: ListOffsets v1 on an empty partition")
	leader.SetRequiredAcks(-1)
	_, err = leader.WriteMessages(kafka.Message{Value: []byte("m0")})
	if err == nil {
		fail("Produce v2 (message format v1) was accepted; shardlog stores only record batches")
	}
	fmt.Printf("ok kafka-go: Produce v2 (message format v1) refused: %v\n", err)
}
