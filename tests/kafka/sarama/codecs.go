// Sarama's own compression codecs against FMQ's Kafka door: for each codec (none, gzip,
// snappy, lz4, zstd) a producer writes a batch of records to a partition of its own, and a
// plain partition consumer reads every partition back from offset 0; prints one JSON line,
// per codec, the (offset, value) pairs read. tests/kafka/test_sarama.py checks them.
// Usage: codecs BOOTSTRAP TOPIC
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/Shopify/sarama"
)

var codecs = []struct {
	name  string
	codec sarama.CompressionCodec
}{
	{"none", sarama.CompressionNone}, {"gzip", sarama.CompressionGZIP},
	{"snappy", sarama.CompressionSnappy}, {"lz4", sarama.CompressionLZ4},
	{"zstd", sarama.CompressionZSTD},
}

const perCodec = 50

type read struct {
	Offset int64  `json:"offset"`
	Value  string `json:"value"`
}

func config(codec sarama.CompressionCodec) *sarama.Config {
	c := sarama.NewConfig()
	c.ClientID = "fmq-sarama-codecs"
	c.Version = sarama.V2_1_0_0 // zstd needs 2.1
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Return.Successes = true
	c.Producer.Partitioner = sarama.NewManualPartitioner
	c.Producer.Compression = codec
	c.Producer.Flush.Messages = perCodec // the whole set in one compressed batch
	c.Producer.Flush.Frequency = 50 * time.Millisecond
	c.Metadata.Retry.Max = 20
	c.Metadata.Retry.Backoff = 250 * time.Millisecond
	return c
}

func run(bootstrap, topic string) (map[string][]read, error) {
	brokers := []string{bootstrap}
	admin, err := sarama.NewClusterAdmin(brokers, config(sarama.CompressionNone))
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	detail := &sarama.TopicDetail{NumPartitions: int32(len(codecs)), ReplicationFactor: 1}
	if err := admin.CreateTopic(topic, detail, false); err != nil {
		return nil, fmt.Errorf("create topic: %w", err)
	}
	defer admin.Close()
	for p, c := range codecs {
		producer, err := sarama.NewAsyncProducer(brokers, config(c.codec))
		if err != nil {
			return nil, fmt.Errorf("%s producer: %w", c.name, err)
		}
		for i := 0; i < perCodec; i++ {
			value := fmt.Sprintf("%s-%03d-%s", c.name, i, "repeated text compresses well")
			producer.Input() <- &sarama.ProducerMessage{Topic: topic, Partition: int32(p),
				Value: sarama.StringEncoder(value)}
		}
		for i := 0; i < perCodec; i++ {
			select {
			case <-producer.Successes():
			case e := <-producer.Errors():
				return nil, fmt.Errorf("%s send: %w", c.name, e.Err)
			}
		}
		if err := producer.Close(); err != nil {
			return nil, fmt.Errorf("%s producer close: %w", c.name, err)
		}
	}
	consumer, err := sarama.NewConsumer(brokers, config(sarama.CompressionNone))
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	defer consumer.Close()
	out := map[string][]read{}
	for p, c := range codecs {
		pc, err := consumer.ConsumePartition(topic, int32(p), sarama.OffsetOldest)
		if err != nil {
			return nil, fmt.Errorf("%s consume: %w", c.name, err)
		}
		timeout := time.After(30 * time.Second)
		for len(out[c.name]) < perCodec {
			select {
			case m := <-pc.Messages():
				out[c.name] = append(out[c.name], read{m.Offset, string(m.Value)})
			case e := <-pc.Errors():
				return nil, fmt.Errorf("%s read: %w", c.name, e.Err)
			case <-timeout:
				return nil, fmt.Errorf("%s: read %d of %d within 30 s", c.name, len(out[c.name]), perCodec)
			}
		}
		pc.Close()
	}
	return out, nil
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: codecs BOOTSTRAP TOPIC")
		os.Exit(2)
	}
	out, err := run(os.Args[1], os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	line, _ := json.Marshal(out)
	fmt.Println(string(line))
}
