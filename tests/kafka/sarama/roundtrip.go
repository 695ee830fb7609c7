// Sarama (Go's Kafka client, as Debian packages it) against FMQ's Kafka door: creates a
// topic, produces records with binary keys, headers, a null value and an empty one through
// an idempotent producer (acks=all), reads them back through a consumer group that marks
// and commits them, reads the group's committed offsets, and prints what it saw as one JSON
// line (bytes in base64). tests/kafka/test_sarama.py builds and runs it and checks every
// byte. Usage: roundtrip BOOTSTRAP TOPIC GROUP
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/Shopify/sarama"
)

type record struct {
	Partition int32             `json:"partition"`
	Offset    int64             `json:"offset"`
	Key       []byte            `json:"key"`
	Value     []byte            `json:"value"`
	Headers   map[string][]byte `json:"headers"`
}

type sent struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
}

type report struct {
	Sent      []sent          `json:"sent"`
	Read      []record        `json:"read"`
	Committed map[int32]int64 `json:"committed"`
}

func config() *sarama.Config {
	c := sarama.NewConfig()
	c.ClientID = "fmq-sarama"
	c.Version = sarama.V2_1_0_0
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Idempotent = true
	c.Net.MaxOpenRequests = 1
	c.Producer.Retry.Max = 10
	c.Producer.Return.Successes = true
	c.Producer.Partitioner = sarama.NewManualPartitioner
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	// A retention makes this sarama commit with OffsetCommit v2; without one it sends v1,
	// which FMQ, like Kafka 4.0, does not serve (docs/kafka.md, "Clients").
	c.Consumer.Offsets.Retention = 7 * 24 * time.Hour
	c.Consumer.Group.Session.Timeout = 10 * time.Second
	c.Consumer.Group.Heartbeat.Interval = time.Second
	c.Metadata.Retry.Max = 20
	c.Metadata.Retry.Backoff = 250 * time.Millisecond
	return c
}

// One message per record of the table the test checks, in its order.
func messages(topic string) []*sarama.ProducerMessage {
	big := make([]byte, 70000)
	for i := range big {
		big[i] = 7
	}
	header := func(k string, v []byte) sarama.RecordHeader { return sarama.RecordHeader{Key: []byte(k), Value: v} }
	return []*sarama.ProducerMessage{
		{Topic: topic, Key: sarama.ByteEncoder("order-1"), Value: sarama.ByteEncoder("paid"),
			Headers: []sarama.RecordHeader{header("bin", []byte{0, 255, 1}), header("text", []byte("çé"))}},
		{Topic: topic, Value: sarama.ByteEncoder("no key")},
		{Topic: topic, Key: sarama.ByteEncoder("tombstone")},
		{Topic: topic, Key: sarama.ByteEncoder("empty"), Value: sarama.ByteEncoder([]byte{}),
			Headers: []sarama.RecordHeader{header("h", []byte{})}},
		{Topic: topic, Key: sarama.ByteEncoder("big"), Value: sarama.ByteEncoder(big)},
	}
}

type reader struct {
	mu   sync.Mutex
	read []record
	want int
	done chan struct{}
	once sync.Once
}

func (r *reader) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (r *reader) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (r *reader) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		headers := map[string][]byte{}
		for _, h := range m.Headers {
			headers[string(h.Key)] = h.Value
		}
		r.mu.Lock()
		r.read = append(r.read, record{m.Partition, m.Offset, m.Key, m.Value, headers})
		n := len(r.read)
		r.mu.Unlock()
		s.MarkMessage(m, "")
		if n >= r.want {
			r.once.Do(func() { close(r.done) })
		}
	}
	return nil
}

func run(bootstrap, topic, group string) (*report, error) {
	brokers := []string{bootstrap}
	admin, err := sarama.NewClusterAdmin(brokers, config())
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 2, ReplicationFactor: 1}, false); err != nil {
		return nil, fmt.Errorf("create topic: %w", err)
	}

	producer, err := sarama.NewSyncProducer(brokers, config())
	if err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	out := &report{Committed: map[int32]int64{}}
	msgs := messages(topic)
	for _, m := range msgs {
		m.Partition = 0
		p, off, err := producer.SendMessage(m)
		if err != nil {
			return nil, fmt.Errorf("send: %w", err)
		}
		out.Sent = append(out.Sent, sent{p, off})
	}
	if err := producer.Close(); err != nil {
		return nil, fmt.Errorf("producer close: %w", err)
	}

	consumers, err := sarama.NewConsumerGroup(brokers, group, config())
	if err != nil {
		return nil, fmt.Errorf("consumer group: %w", err)
	}
	r := &reader{want: len(msgs), done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			if err := consumers.Consume(ctx, []string{topic}, r); err != nil {
				errs <- err
				return
			}
		}
	}()
	select {
	case <-r.done:
	case err := <-errs:
		return nil, fmt.Errorf("consume: %w", err)
	case <-ctx.Done():
		return nil, fmt.Errorf("read %d of %d within 60 s", len(r.read), len(msgs))
	}
	cancel()
	if err := consumers.Close(); err != nil { // commits what was marked
		return nil, fmt.Errorf("consumer group close: %w", err)
	}
	out.Read = r.read

	offsets, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: {0, 1}})
	if err != nil {
		return nil, fmt.Errorf("committed offsets: %w", err)
	}
	for p, block := range offsets.Blocks[topic] {
		if block.Err != sarama.ErrNoError {
			return nil, fmt.Errorf("committed offset of partition %d: %w", p, block.Err)
		}
		out.Committed[p] = block.Offset
	}
	return out, admin.Close()
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: roundtrip BOOTSTRAP TOPIC GROUP")
		os.Exit(2)
	}
	out, err := run(os.Args[1], os.Args[2], os.Args[3])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	line, _ := json.Marshal(out)
	fmt.Println(string(line))
}
