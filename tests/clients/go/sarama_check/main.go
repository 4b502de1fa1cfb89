// sarama_check: Shopify sarama (Debian's 1.22) against shardlog, configured for one Kafka
// version: create a topic, produce with acks=all, consume it back, consume part of it in a
// consumer group that commits, then check that a restarted member resumes at the commit.
// Exits non-zero with a message on the first failure.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/Shopify/sarama"
)

const total = 10
const firstHalf = 5

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "FAIL sarama: "+format+"\n", args...)
	os.Exit(1)
}

// half consumes until it has seen `want` messages, marking each, then stops the session.
type half struct {
	want   int
	seen   []int64
	cancel context.CancelFunc
}

func (h *half) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *half) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *half) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for m := range c.Messages() {
		if len(h.seen) >= h.want {
			break
		}
		h.seen = append(h.seen, m.Offset)
		s.MarkMessage(m, "")
		if len(h.seen) == h.want {
			h.cancel()
			break
		}
	}
	return nil
}

func groupRound(brokers []string, config *sarama.Config, group, topic string, want int) []int64 {
	g, err := sarama.NewConsumerGroup(brokers, group, config)
	if err != nil {
		fail("consumer group: %v", err)
	}
	go func() {
		for err := range g.Errors() {
			fmt.Fprintf(os.Stderr, "FAIL sarama: group error channel: %v\n", err)
			os.Exit(1)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := &half{want: want, cancel: cancel}
	for ctx.Err() == nil && len(h.seen) < want {
		if err := g.Consume(ctx, []string{topic}, h); err != nil {
			fail("group consume: %v", err)
		}
	}
	// Close flushes the marked offsets (an OffsetCommit) before leaving the group.
	if err := g.Close(); err != nil {
		fail("group close: %v", err)
	}
	if len(h.seen) < want {
		fail("group saw %d of %d messages within 60 s", len(h.seen), want)
	}
	return h.seen
}

func main() {
	bootstrap := flag.String("bootstrap", "127.0.0.1:9092", "broker")
	versionName := flag.String("version", "2.2.0", "Kafka version sarama is configured for")
	flag.Parse()
	version, err := sarama.ParseKafkaVersion(*versionName)
	if err != nil {
		fail("version: %v", err)
	}
	brokers := []string{*bootstrap}
	suffix := fmt.Sprintf("%d", time.Now().UnixNano())
	topic, group := "sarama-"+suffix, "sarama-group-"+suffix

	config := sarama.NewConfig()
	config.Version = version
	config.ClientID = "sarama-check-" + *versionName
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Return.Successes = true
	config.Consumer.Return.Errors = true
	config.Consumer.Offsets.Initial = sarama.OffsetOldest
	config.Consumer.Offsets.CommitInterval = 100 * time.Millisecond

	admin, err := sarama.NewClusterAdmin(brokers, config)
	if err != nil {
		fail("cluster admin: %v", err)
	}
	detail := &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}
	if err := admin.CreateTopic(topic, detail, false); err != nil {
		fail("create topic: %v", err)
	}
	admin.Close()

	producer, err := sarama.NewSyncProducer(brokers, config)
	if err != nil {
		fail("producer: %v", err)
	}
	for i := 0; i < total; i++ {
		msg := &sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(fmt.Sprintf("m%d", i))}
		partition, offset, err := producer.SendMessage(msg)
		if err != nil {
			fail("produce m%d: %v", i, err)
		}
		if partition != 0 || offset != int64(i) {
			fail("m%d landed at %d/%d, want 0/%d", i, partition, offset, i)
		}
	}
	producer.Close()
	fmt.Printf("ok sarama %s: %d messages produced with acks=all\n", *versionName, total)

	consumer, err := sarama.NewConsumer(brokers, config)
	if err != nil {
		fail("consumer: %v", err)
	}
	pc, err := consumer.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		fail("consume partition: %v", err)
	}
	for i := 0; i < total; i++ {
		select {
		case m := <-pc.Messages():
			if string(m.Value) != fmt.Sprintf("m%d", i) || m.Offset != int64(i) {
				fail("consumed %q at %d, want m%d at %d", m.Value, m.Offset, i, i)
			}
		case err := <-pc.Errors():
			fail("consume: %v", err)
		case <-time.After(30 * time.Second):
			fail("consumed only %d of %d messages", i, total)
		}
	}
	pc.Close()
	consumer.Close()
	fmt.Printf("ok sarama %s: %d messages consumed back in order\n", *versionName, total)

	first := groupRound(brokers, config, group, topic, firstHalf)
	if first[0] != 0 {
		fail("a new group started at offset %d, want 0", first[0])
	}
	// The committed offset, read back through OffsetFetch.
	client, err := sarama.NewClient(brokers, config)
	if err != nil {
		fail("client: %v", err)
	}
	manager, err := sarama.NewOffsetManagerFromClient(group, client)
	if err != nil {
		fail("offset manager: %v", err)
	}
	pom, err := manager.ManagePartition(topic, 0)
	if err != nil {
		fail("manage partition: %v", err)
	}
	committed, _ := pom.NextOffset()
	pom.Close()
	manager.Close()
	client.Close()
	if committed != firstHalf {
		fail("committed offset is %d, want %d", committed, firstHalf)
	}
	fmt.Printf("ok sarama %s: group committed offset %d\n", *versionName, committed)

	second := groupRound(brokers, config, group, topic, total-firstHalf)
	if second[0] != firstHalf {
		fail("the restarted group member resumed at %d, want %d", second[0], firstHalf)
	}
	fmt.Printf("ok sarama %s: restarted group member resumed at offset %d\n", *versionName, second[0])
}
