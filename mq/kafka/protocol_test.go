package kafka

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ndma/ndma/mq"
)

// rawConn is a TCP connection to the front end speaking kmsg requests.
type rawConn struct {
	t  *testing.T
	nc net.Conn
	r  *bufio.Reader
	id int32
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawConn{t: t, nc: nc, r: bufio.NewReader(nc)}
}

// send writes req at version v and reads the response frame: its body
// after the correlation id (and the flexible header's tags), or an
// error when the connection ended.
func (c *rawConn) send(req kmsg.Request, v int16) ([]byte, error) {
	req.SetVersion(v)
	c.id++
	if _, err := c.nc.Write(kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw")).AppendRequest(nil, req, c.id)); err != nil {
		return nil, err
	}
	var size [4]byte
	if _, err := io.ReadFull(c.r, size[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c.r, b); err != nil || len(b) < 4 {
		return nil, fmt.Errorf("a response cut short: %v", err)
	}
	if got := int32(binary.BigEndian.Uint32(b)); got != c.id {
		c.t.Fatalf("correlation id %d, want %d", got, c.id)
	}
	b = b[4:]
	if req.IsFlexible() && req.Key() != 18 {
		b = b[1:]
	}
	return b, nil
}

// closed reports whether the server ended the connection.
func (c *rawConn) closed() bool {
	_, err := c.r.ReadByte()
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed)
}

// TestUnsupportedRequests: a request kind not served is answered
// UNSUPPORTED_VERSION where its response has a top-level error code
// (InitProducerID: the idempotent producer's, which is not served), as
// is a served kind at a version not served; an ApiVersions too new is
// answered in version 0 with what is served; a kind whose response
// cannot carry the error, and a key no Kafka has, end the connection.
func TestUnsupportedRequests(t *testing.T) {
	s, addr := startServer(t, Config{Catalog: startCatalog(t)})
	c := dialRaw(t, addr)
	b, err := c.send(kmsg.NewPtrInitProducerIDRequest(), 1)
	resp := kmsg.NewPtrInitProducerIDResponse()
	resp.SetVersion(1)
	if err != nil || resp.ReadFrom(b) != nil || resp.ErrorCode != errUnsupportedVersion {
		t.Fatalf("InitProducerID: %+v %v", resp, err)
	}
	b, err = c.send(kmsg.NewPtrJoinGroupRequest(), 9) // JoinGroup is served to v7
	jr := kmsg.NewPtrJoinGroupResponse()
	jr.SetVersion(9)
	if err != nil || jr.ReadFrom(b) != nil || jr.ErrorCode != errUnsupportedVersion {
		t.Fatalf("JoinGroup v9: %+v %v", jr, err)
	}
	b, err = c.send(kmsg.NewPtrApiVersionsRequest(), 4)
	av := kmsg.NewPtrApiVersionsResponse()
	av.SetVersion(0)
	if err != nil || av.ReadFrom(b) != nil || av.ErrorCode != errUnsupportedVersion || len(av.ApiKeys) != len(served) {
		t.Fatalf("ApiVersions v4: %+v %v", av, err)
	}
	b, err = c.send(kmsg.NewPtrApiVersionsRequest(), 3)
	av = kmsg.NewPtrApiVersionsResponse()
	av.SetVersion(3)
	if err != nil || av.ReadFrom(b) != nil || av.ErrorCode != 0 || len(av.ApiKeys) != len(served) {
		t.Fatalf("ApiVersions v3: %+v %v", av, err)
	}
	// DescribeGroups answers per group: no top-level error code.
	if _, err := c.send(kmsg.NewPtrDescribeGroupsRequest(), 0); err == nil {
		t.Fatal("DescribeGroups was answered")
	}
	c = dialRaw(t, addr)
	frame := []byte{0, 0, 0, 10, 0x7f, 0x00, 0, 0, 0, 0, 0, 1, 0xff, 0xff} // key 32512
	if _, err := c.nc.Write(frame); err != nil || !c.closed() {
		t.Fatalf("an unknown key: the connection stayed (%v)", err)
	}
	if st := s.Stats(); st.Rejected != 2 || st.Malformed != 2 {
		t.Errorf("stats %+v: want 2 rejected, 2 ended", st)
	}
}

// TestMalformedFrames: a frame too large, too small, or whose body does
// not decode ends its connection; the server goes on serving others.
func TestMalformedFrames(t *testing.T) {
	s, addr := startServer(t, Config{Catalog: startCatalog(t), MaxFrame: MinMaxFrame})
	good := kmsg.NewRequestFormatter().AppendRequest(nil, kmsg.NewPtrMetadataRequest(), 1)
	for i, frame := range [][]byte{
		{0x7f, 0xff, 0xff, 0xff},
		binary.BigEndian.AppendUint32(nil, MinMaxFrame+1),
		{0, 0, 0, 3, 0, 3, 0},
		{0xff, 0xff, 0xff, 0xfb},
		append([]byte{0, 0, 0, 12}, good[4:16]...),                   // a Metadata body cut short
		{0, 0, 0, 10, 0, 3, 0, 1, 0, 0, 0, 1, 0x7f, 0xff},            // a client id past the frame
		{0, 0, 0, 11, 0, 3, 0, 9, 0, 0, 0, 1, 0xff, 0xff, 0xff},      // flexible: bad tags
		append(binary.BigEndian.AppendUint32(nil, 100), good[4:]...), // a frame cut short
	} {
		c := dialRaw(t, addr)
		if _, err := c.nc.Write(frame); err != nil {
			t.Fatal(err)
		}
		if i == 7 {
			c.nc.(*net.TCPConn).CloseWrite()
		}
		if !c.closed() {
			t.Errorf("frame %d (% x): the connection stayed", i, frame)
		}
	}
	c := dialRaw(t, addr)
	if _, err := c.send(kmsg.NewPtrMetadataRequest(), 9); err != nil {
		t.Fatalf("a good request after bad ones: %v", err)
	}
	if st := s.Stats(); st.Malformed != 7 {
		t.Errorf("stats %+v: want 7 connections ended by malformed frames", st)
	}
}

// TestMaxConns: a connection over MaxConns is closed at once; one that
// ends frees its place.
func TestMaxConns(t *testing.T) {
	s, addr := startServer(t, Config{Catalog: startCatalog(t), MaxConns: 1})
	a := dialRaw(t, addr)
	if _, err := a.send(kmsg.NewPtrApiVersionsRequest(), 3); err != nil {
		t.Fatal(err)
	}
	b := dialRaw(t, addr)
	if !b.closed() {
		t.Fatal("a second connection over MaxConns 1 stayed")
	}
	a.nc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().Conns != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	c := dialRaw(t, addr)
	if _, err := c.send(kmsg.NewPtrApiVersionsRequest(), 3); err != nil {
		t.Fatalf("after the first left: %v", err)
	}
	if st := s.Stats(); st.Refused != 1 {
		t.Errorf("stats %+v: want 1 refused", st)
	}
}

// TestCreateTopics: CreateTopics makes topics in the catalog with the
// partitions and copies asked for, and refuses what mq cannot make with
// Kafka's codes.
func TestCreateTopics(t *testing.T) {
	cat := startCatalog(t)
	_, addr := startServer(t, Config{Catalog: cat})
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := testCtx(t)
	topic := func(name string, parts int32, copies int16, cfg bool) kmsg.CreateTopicsRequestTopic {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, parts, copies
		if cfg {
			v := "1000"
			rt.Configs = []kmsg.CreateTopicsRequestTopicConfig{{Name: "retention.ms", Value: &v}}
		}
		return rt
	}
	req := kmsg.NewPtrCreateTopicsRequest()
	req.Topics = []kmsg.CreateTopicsRequestTopic{topic("events", 3, 1, false), topic("events", 3, 1, false),
		topic("bad name", 1, 1, false), topic("wide", 1, 3, false), topic("configured", 1, 1, true),
		topic("none", 0, 1, false), topic("dflt", -1, -1, false)}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	want := []int16{0, errTopicExists, errInvalidTopic, errInvalidReplication, errInvalidConfig, errInvalidPartitions, 0}
	for i, rt := range resp.Topics {
		if rt.ErrorCode != want[i] {
			t.Errorf("topic %d %q: code %d, want %d (%v)", i, rt.Topic, rt.ErrorCode, want[i], rt.ErrorMessage)
		}
	}
	for name, parts := range map[string]int{"events": 3, "dflt": 1} {
		top, err := cat.Open(ctx, name)
		if err != nil || top.Layout().Partitions != parts || top.Layout().SegmentBytes != testLayout.SegmentBytes {
			t.Errorf("%s in the catalog: %v", name, err)
		}
	}
	if _, err := cat.Open(ctx, "wide"); !errors.Is(err, mq.ErrNotFound) {
		t.Errorf("a refused topic is in the catalog: %v", err)
	}
	md := kmsg.NewPtrMetadataRequest()
	for _, n := range []string{"events", "nosuch"} {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(n)
		md.Topics = append(md.Topics, mt)
	}
	mresp, err := md.RequestWith(ctx, cl)
	if err != nil || len(mresp.Topics) != 2 || len(mresp.Topics[0].Partitions) != 3 || mresp.Topics[1].ErrorCode != errUnknownTopic {
		t.Fatalf("metadata: %+v %v", mresp, err)
	}
}

// TestBatchCodec: records decoded from a Kafka batch and encoded back
// keep keys, values and headers, and the encoded batch spans the Kafka
// offsets up to the next batch; chunks splits at 63 records.
func TestBatchCodec(t *testing.T) {
	recs := testRecords(130)
	enc := encodeBatch(nil, recs, 4096+64*40)
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(enc); err != nil || rb.FirstOffset != 4096 || rb.LastOffsetDelta != 64*40-1 || rb.NumRecords != 130 || rb.FirstTimestamp != 5000 {
		t.Fatalf("batch %+v %v", rb, err)
	}
	got, err := decodeBatches(enc)
	if err != nil || len(got) != len(recs) {
		t.Fatalf("decoded %d records: %v", len(got), err)
	}
	for i, r := range got {
		if !bytes.Equal(r.Key, recs[i].Key) || !bytes.Equal(r.Value, recs[i].Value) || len(r.Headers) != 1 || r.Headers[0].Value[0] != byte(i) {
			t.Fatalf("record %d: %+v", i, r)
		}
	}
	bad := bytes.Clone(enc)
	bad[len(bad)-1] ^= 1 // a record's last byte: the batch no longer decodes whole, or differs
	if r, err := decodeBatches(bad); err == nil && bytes.Equal(r[len(r)-1].Headers[0].Value, recs[len(recs)-1].Headers[0].Value) {
		t.Error("a flipped byte went unnoticed")
	}
	cs, err := chunks(got, 1<<20)
	if err != nil || len(cs) != 3 || len(cs[0]) != maxRecordsPerBatch || len(cs[2]) != 130-2*maxRecordsPerBatch {
		t.Fatalf("chunks of 130: %d %v", len(cs), err)
	}
	if _, err := chunks([]mq.Record{{Value: make([]byte, 200)}}, 256); !errors.Is(err, mq.ErrTooLarge) {
		t.Fatalf("a record over the largest batch: %v", err)
	}
}

// testRecords is n records of one mq batch at offset 4096.
func testRecords(n int) []mq.Record {
	var recs []mq.Record
	for i := range n {
		recs = append(recs, mq.Record{Key: []byte(fmt.Sprint("k", i)), Value: []byte(fmt.Sprint("v", i)),
			Headers: []mq.Header{{Key: "h", Value: []byte{byte(i)}}}, Offset: 4096, Index: i, Timestamp: 5e9})
	}
	return recs
}

// TestEveryServedVersion sends each served request kind, empty, at every
// version served, on one connection: each is answered with a response
// that decodes at that version, and the connection stays.
func TestEveryServedVersion(t *testing.T) {
	s, addr := startServer(t, Config{Catalog: startCatalog(t)})
	c := dialRaw(t, addr)
	n := 0
	for key, vs := range served {
		for v := vs[0]; v <= vs[1]; v++ {
			req := kmsg.RequestForKey(key)
			if p, ok := req.(*kmsg.ProduceRequest); ok {
				p.Acks = -1 // acks 0 has no response
			}
			if jg, ok := req.(*kmsg.JoinGroupRequest); ok {
				jg.Group = "" // refused at once, not waited on
			}
			b, err := c.send(req, v)
			if err != nil {
				t.Fatalf("%s v%d: %v", kmsg.NameForKey(key), v, err)
			}
			resp := req.ResponseKind()
			resp.SetVersion(v)
			if err := resp.ReadFrom(b); err != nil {
				t.Errorf("%s v%d: the response does not decode: %v", kmsg.NameForKey(key), v, err)
			}
			n++
		}
	}
	if st := s.Stats(); st.Requests != uint64(n) || st.Malformed != 0 || st.Rejected != 0 {
		t.Errorf("stats %+v after %d requests", st, n)
	}
}

// TestFindCoordinator: the front end names itself, at the address the
// client came in on, as every group's coordinator, in the single-key
// (v3) and batched (v4) forms; a transaction coordinator is refused.
func TestFindCoordinator(t *testing.T) {
	_, addr := startServer(t, Config{Catalog: startCatalog(t)})
	c := dialRaw(t, addr)
	host, port, _ := net.SplitHostPort(addr)
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorKey = "g"
	b, err := c.send(req, 3)
	resp := kmsg.NewPtrFindCoordinatorResponse()
	resp.SetVersion(3)
	if err != nil || resp.ReadFrom(b) != nil || resp.ErrorCode != 0 || resp.Host != host || fmt.Sprint(resp.Port) != port || resp.NodeID != 0 {
		t.Fatalf("v3: %+v %v", resp, err)
	}
	req = kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorKeys = []string{"a", "b"}
	b, err = c.send(req, 4)
	resp = kmsg.NewPtrFindCoordinatorResponse()
	resp.SetVersion(4)
	if err != nil || resp.ReadFrom(b) != nil || len(resp.Coordinators) != 2 || resp.Coordinators[1].Key != "b" || resp.Coordinators[1].Host != host {
		t.Fatalf("v4: %+v %v", resp, err)
	}
	req.CoordinatorType = 1
	b, err = c.send(req, 4)
	resp = kmsg.NewPtrFindCoordinatorResponse()
	resp.SetVersion(4)
	if err != nil || resp.ReadFrom(b) != nil || len(resp.Coordinators) != 2 || resp.Coordinators[0].ErrorCode != errInvalidRequest {
		t.Fatalf("a transaction coordinator: %+v %v", resp, err)
	}
}
