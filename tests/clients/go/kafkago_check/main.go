// kafkago_check: segmentio kafka-go (Debian's 0.2.1) against shardlog. That release sends
// fixed request versions without asking ApiVersions and writes and reads message format
// v1 only (Produce v2, Fetch v2), which shardlog converts to and from its stored record
// batches as Kafka 3.x does. Checked: CreateTopics v0, Metadata v1, ListOffsets v1, a
// Writer producing with RequiredAcks -1 (acks=all), gzip/snappy/lz4-compressed message
// sets, every record read back byte-identical at its offset (Fetch v2), and a consumer
// group (JoinGroup v1, SyncGroup v0, Heartbeat v0, OffsetCommit v2, OffsetFetch v1) that
// commits half the records, after which a new reader of the group resumes there.
// Exits non-zero with a message when any of that does not hold.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	kafka "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/gzip"
	"github.com/segmentio/kafka-go/lz4"
	"github.com/segmentio/kafka-go/snappy"
)

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "FAIL kafka-go: "+format+"\n", args...)
	os.Exit(1)
}

// record i: a key (null for every third), and a value with bytes of every kind.
func record(i int) kafka.Message {
	var key []byte
	if i%3 != 0 {
		key = []byte(fmt.Sprintf("key-%d", i))
	}
	value := []byte(fmt.Sprintf("value-%d:", i))
	value = append(value, 0, 1, 2, 0xfe, 0xff, byte(i))
	return kafka.Message{Key: key, Value: value}
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

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
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

	// 10 records through the Writer, acks=all, uncompressed: offsets 0-9.
	var sent []kafka.Message
	writer := kafka.NewWriter(kafka.WriterConfig{
		Brokers: []string{*bootstrap}, Topic: topic, RequiredAcks: -1, BatchSize: 4,
		BatchTimeout: 10 * time.Millisecond,
	})
	for i := 0; i < 10; i++ {
		sent = append(sent, record(i))
	}
	if err := writer.WriteMessages(ctx, sent...); err != nil {
		fail("Writer with RequiredAcks -1 (Produce v2, message format v1): %v", err)
	}
	writer.Close()
	fmt.Println("ok kafka-go: Writer produced 10 records with RequiredAcks -1 (Produce v2)")

	// 3 records per codec in one compressed wrapper message each: offsets 10-18.
	leader.SetRequiredAcks(-1)
	codecs := []kafka.CompressionCodec{
		gzip.NewCompressionCodec(), snappy.NewCompressionCodec(), lz4.NewCompressionCodec(),
	}
	for c, codec := range codecs {
		var batch []kafka.Message
		for i := 0; i < 3; i++ {
			batch = append(batch, record(10+3*c+i))
		}
		if _, err := leader.WriteCompressedMessages(codec, batch...); err != nil {
			fail("compressed (codec %d) Produce v2: %v", codec.Code(), err)
		}
		sent = append(sent, batch...)
	}
	fmt.Println("ok kafka-go: gzip, snappy and lz4 message sets produced with acks=all")

	// Everything back, byte-identical, at its offset (Fetch v2: down-converted to magic 1).
	if _, err := leader.Seek(0, kafka.SeekAbsolute); err != nil {
		fail("seek: %v", err)
	}
	for want := 0; want < len(sent); {
		batch := leader.ReadBatch(1, 1<<20)
		for {
			msg, err := batch.ReadMessage()
			if err != nil {
				break
			}
			if msg.Offset != int64(want) {
				fail("Fetch v2: record at offset %d, expected offset %d", msg.Offset, want)
			}
			if !bytes.Equal(msg.Key, sent[want].Key) || !bytes.Equal(msg.Value, sent[want].Value) {
				fail("Fetch v2: offset %d read key %q value %q, sent key %q value %q", want,
					msg.Key, msg.Value, sent[want].Key, sent[want].Value)
			}
			if (msg.Key == nil) != (sent[want].Key == nil) {
				fail("Fetch v2: offset %d: null key not kept", want)
			}
			want++
		}
		if err := batch.Close(); err != nil {
			fail("Fetch v2 (message format v1) at offset %d: %v", want, err)
		}
	}
	leader.Close()
	fmt.Printf("ok kafka-go: %d records read back byte-identical (Fetch v2)\n", len(sent))

	// A consumer group commits offsets 0-8 (the next to read is 9); a new reader resumes.
	group := topic + "-group"
	reader := func() *kafka.Reader {
		return kafka.NewReader(kafka.ReaderConfig{
			Brokers: []string{*bootstrap}, Topic: topic, GroupID: group, MinBytes: 1,
			MaxBytes: 1 << 20, MaxWait: 100 * time.Millisecond,
			HeartbeatInterval: time.Second, SessionTimeout: 10 * time.Second,
		})
	}
	consumer := reader()
	var last9 kafka.Message
	for i := 0; i < 9; i++ {
		msg, err := consumer.FetchMessage(ctx)
		if err != nil {
			fail("group reader, record %d: %v", i, err)
		}
		if msg.Offset != int64(i) || !bytes.Equal(msg.Value, sent[i].Value) {
			fail("group reader read offset %d %q, expected offset %d", msg.Offset, msg.Value, i)
		}
		last9 = msg
	}
	if err := consumer.CommitMessages(ctx, last9); err != nil {
		fail("OffsetCommit v2: %v", err)
	}
	consumer.Close()
	fmt.Println("ok kafka-go: consumer group read 9 records and committed (OffsetCommit v2)")

	resumed := reader()
	msg, err := resumed.FetchMessage(ctx)
	if err != nil {
		fail("new group reader: %v", err)
	}
	if msg.Offset != 9 || !bytes.Equal(msg.Value, sent[9].Value) {
		fail("new group reader started at offset %d (%q), expected the committed 9", msg.Offset,
			msg.Value)
	}
	resumed.Close()
	fmt.Println("ok kafka-go: a new reader of the group resumed at the committed offset 9")
}
