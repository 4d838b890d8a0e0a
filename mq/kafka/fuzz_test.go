package kafka

import (
	"bytes"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
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
