package kafka

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ndma/ndma/mq"
)

// FuzzFrame feeds arbitrary bytes to the frame decoder (readFrame,
// parseRequest) and the record batch decoder: each returns a request or
// an error, never panics, and a request that decodes has a served kind
// answered or is turned away by its key.
func FuzzFrame(f *testing.F) {
	fm := kmsg.NewRequestFormatter(kmsg.FormatterClientID("fuzz"))
	add := func(r kmsg.Request, v int16) {
		r.SetVersion(v)
		f.Add(fm.AppendRequest(nil, r, 7))
	}
	add(kmsg.NewPtrApiVersionsRequest(), 3)
	add(kmsg.NewPtrMetadataRequest(), 9)
	add(kmsg.NewPtrFetchRequest(), 12)
	add(kmsg.NewPtrJoinGroupRequest(), 7)
	add(kmsg.NewPtrOffsetCommitRequest(), 8)
	pr := kmsg.NewPtrProduceRequest()
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic = "t"
	pt.Partitions = []kmsg.ProduceRequestTopicPartition{{Records: encodeBatch(nil, testRecords(3), 4096+128)}}
	pr.Topics = append(pr.Topics, pt)
	add(pr, 9)
	f.Add([]byte{0, 0, 0, 10, 0x7f, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		frame, err := readFrame(bytes.NewReader(in), MinMaxFrame)
		if err != nil {
			return
		}
		r, err := parseRequest(frame)
		if err != nil {
			return
		}
		if p, ok := r.body.(*kmsg.ProduceRequest); ok {
			for _, t := range p.Topics {
				for _, part := range t.Partitions {
					_, _ = decodeBatches(part.Records)
				}
			}
		}
		_, _ = decodeBatches(frame)
	})
}

// FuzzHandle feeds the requests that decode from arbitrary bytes to the
// handlers of a front end over a real catalog (a switch and a memory
// node on loopback): each is answered or refused without a panic, and
// an answer encodes. Waits are cut short: a Fetch waits for nothing, a
// group member's timeouts are a second.
func FuzzHandle(f *testing.F) {
	cat := startCatalog(f)
	fm := kmsg.NewRequestFormatter(kmsg.FormatterClientID("fuzz"))
	var seed []byte
	add := func(r kmsg.Request, v int16) {
		r.SetVersion(v)
		seed = fm.AppendRequest(seed, r, 1)
		f.Add(fm.AppendRequest(nil, r, 1))
	}
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: "fz", NumPartitions: 2, ReplicationFactor: 1}}
	add(ct, 5)
	pr := kmsg.NewPtrProduceRequest()
	pr.Acks = -1
	pr.Topics = []kmsg.ProduceRequestTopic{{Topic: "fz", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 1, Records: encodeBatch(nil, testRecords(3), 4096+128)}}}}
	add(pr, 9)
	fr := kmsg.NewPtrFetchRequest()
	fr.Topics = []kmsg.FetchRequestTopic{{Topic: "fz", Partitions: []kmsg.FetchRequestTopicPartition{{Partition: 1, FetchOffset: 5}}}}
	add(fr, 12)
	jg := kmsg.NewPtrJoinGroupRequest()
	jg.Group, jg.ProtocolType, jg.Protocols = "g", "consumer", []kmsg.JoinGroupRequestProtocol{{Name: "range"}}
	add(jg, 7)
	oc := kmsg.NewPtrOffsetCommitRequest()
	oc.Group, oc.Generation = "g", -1
	oc.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "fz", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 1, Offset: 4100}}}}
	add(oc, 8)
	add(kmsg.NewPtrOffsetFetchRequest(), 7)
	add(kmsg.NewPtrMetadataRequest(), 9)
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.Topics = []kmsg.ListOffsetsRequestTopic{{Topic: "fz", Partitions: []kmsg.ListOffsetsRequestTopicPartition{{Partition: 0, Timestamp: -2}}}}
	add(lo, 6)
	f.Add(seed)
	f.Fuzz(func(t *testing.T, in []byte) {
		s, err := New(Config{Catalog: cat, Topic: testLayout, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		c := &conn{s: s, nc: a, consumers: make(map[string]*mq.Consumer), next: make(map[partKey]uint64)}
		r := bytes.NewReader(in)
		for {
			frame, err := readFrame(r, MinMaxFrame)
			if err != nil {
				return
			}
			req, err := parseRequest(frame)
			if err != nil {
				return
			}
			switch body := req.body.(type) {
			case *kmsg.FetchRequest:
				body.MaxWaitMillis = 0
			case *kmsg.JoinGroupRequest:
				body.SessionTimeoutMillis, body.RebalanceTimeoutMillis = 1000, 1000
			}
			resp, err := c.handle(req)
			if err != nil {
				return
			}
			if resp != nil {
				_ = appendResponse(nil, req, resp)
			}
		}
	})
}
