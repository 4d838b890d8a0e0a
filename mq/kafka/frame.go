package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// errMalformed is wrapped by the error for a frame that does not
// decode: it ends the connection.
var errMalformed = errors.New("kafka: malformed request")

// readFrame reads one size-prefixed request of at most maxFrame bytes.
func readFrame(r io.Reader, maxFrame int) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := int32(binary.BigEndian.Uint32(n[:]))
	if size < 8 || int64(size) > int64(maxFrame) {
		return nil, fmt.Errorf("%w: a frame of %d bytes (want 8 to %d)", errMalformed, size, maxFrame)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// request is a decoded request: its header, and its body unless the
// key or version is one kmsg does not know.
type request struct {
	key, version int16
	correlation  int32
	clientID     string
	body         kmsg.Request // nil: unknown key or version
}

// parseRequest decodes a frame: the request header (key, version,
// correlation id, client id and, in flexible versions, tagged fields:
// the one part kmsg leaves to a server) and the body with kmsg.
func parseRequest(b []byte) (*request, error) {
	r := &request{key: int16(binary.BigEndian.Uint16(b)), version: int16(binary.BigEndian.Uint16(b[2:])),
		correlation: int32(binary.BigEndian.Uint32(b[4:]))}
	rest := b[8:]
	if len(rest) < 2 {
		return nil, fmt.Errorf("%w: no client id", errMalformed)
	}
	if n := int16(binary.BigEndian.Uint16(rest)); n >= 0 {
		if int(n) > len(rest)-2 {
			return nil, fmt.Errorf("%w: a client id of %d bytes overruns the frame", errMalformed, n)
		}
		r.clientID = string(rest[2 : 2+n])
		rest = rest[2+n:]
	} else {
		rest = rest[2:]
	}
	body := kmsg.RequestForKey(r.key)
	if body == nil || r.version < 0 || r.version > body.MaxVersion() {
		return r, nil // answered by its key, or the connection ends
	}
	body.SetVersion(r.version)
	if body.IsFlexible() {
		var err error
		if rest, err = skipTags(rest); err != nil {
			return nil, err
		}
	}
	if err := body.ReadFrom(rest); err != nil {
		return nil, fmt.Errorf("%w: %s v%d: %v", errMalformed, kmsg.NameForKey(r.key), r.version, err)
	}
	r.body = body
	return r, nil
}

// skipTags skips a flexible header's tagged fields.
func skipTags(b []byte) ([]byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, fmt.Errorf("%w: header tags", errMalformed)
	}
	b = b[k:]
	for range n {
		if _, k = binary.Uvarint(b); k <= 0 {
			return nil, fmt.Errorf("%w: header tag", errMalformed)
		}
		b = b[k:]
		size, k := binary.Uvarint(b)
		if k <= 0 || size > uint64(len(b)-k) {
			return nil, fmt.Errorf("%w: header tag size", errMalformed)
		}
		b = b[k+int(size):]
	}
	return b, nil
}

// appendResponse appends resp framed for req: size, correlation id, the
// flexible header's empty tags (never for ApiVersions), then the body.
func appendResponse(dst []byte, req *request, resp kmsg.Response) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(req.correlation))
	if resp.IsFlexible() && resp.Key() != 18 {
		dst = append(dst, 0)
	}
	dst = resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// served is the versions served of each request kind.
var served = map[int16][2]int16{
	0:  {3, 9}, // Produce: record batches of magic 2
	1:  {4, 12},
	2:  {1, 6},
	3:  {0, 9},
	8:  {0, 8},
	9:  {1, 7},
	10: {0, 4},
	11: {0, 7},
	12: {0, 4},
	13: {0, 4},
	14: {0, 5},
	18: {0, 3},
	19: {0, 6},
}

// Kafka error codes the front end answers with.
const (
	errUnknownServer         int16 = -1
	errOffsetOutOfRange      int16 = 1
	errCorruptMessage        int16 = 2
	errUnknownTopic          int16 = 3
	errRequestTimedOut       int16 = 7
	errMessageTooLarge       int16 = 10
	errCoordinatorNotAvail   int16 = 15
	errInvalidTopic          int16 = 17
	errNotEnoughReplicasAft  int16 = 20
	errIllegalGeneration     int16 = 22
	errInconsistentProtocol  int16 = 23
	errUnknownMember         int16 = 25
	errInvalidSessionTimeout int16 = 26
	errRebalanceInProgress   int16 = 27
	errUnsupportedVersion    int16 = 35
	errTopicExists           int16 = 36
	errInvalidPartitions     int16 = 37
	errInvalidReplication    int16 = 38
	errInvalidConfig         int16 = 40
	errInvalidRequest        int16 = 42
	errPolicyViolation       int16 = 44
	errUnsupportedCompress   int16 = 76
	errGroupMaxSize          int16 = 81
	errInvalidRecord         int16 = 87
)

// handle answers one request: nil with no error when it takes no
// response, an error when the connection must end.
func (c *conn) handle(r *request) (kmsg.Response, error) {
	if r.key == 18 && (r.body == nil || !isServed(r)) {
		// A client too new: answer in version 0 with what is served,
		// as a Kafka broker does, so that it tries again.
		resp := c.apiVersions()
		resp.ErrorCode = errUnsupportedVersion
		resp.SetVersion(0)
		r.version = 0
		return resp, nil
	}
	if r.body == nil {
		return nil, fmt.Errorf("%w: request key %d version %d is unknown", errMalformed, r.key, r.version)
	}
	if !isServed(r) {
		return c.unsupported(r)
	}
	var resp kmsg.Response
	switch req := r.body.(type) {
	case *kmsg.ApiVersionsRequest:
		resp = c.apiVersions()
	case *kmsg.MetadataRequest:
		resp = c.metadata(req)
	case *kmsg.ProduceRequest:
		pr := c.produce(req)
		if req.Acks == 0 {
			return nil, nil
		}
		resp = pr
	case *kmsg.FetchRequest:
		resp = c.fetch(req)
	case *kmsg.ListOffsetsRequest:
		resp = c.listOffsets(req)
	case *kmsg.CreateTopicsRequest:
		resp = c.createTopics(req)
	case *kmsg.FindCoordinatorRequest:
		resp = c.findCoordinator(req)
	case *kmsg.OffsetCommitRequest:
		resp = c.offsetCommit(req)
	case *kmsg.OffsetFetchRequest:
		resp = c.offsetFetch(req)
	default:
		resp = c.handleGroup(r.body)
	}
	resp.SetVersion(r.version)
	return resp, nil
}

func isServed(r *request) bool {
	v, ok := served[r.key]
	return ok && r.version >= v[0] && r.version <= v[1]
}

// unsupported answers a request kind or version not served: its
// response with the top-level error code UNSUPPORTED_VERSION, where the
// response has one at that version; otherwise the connection ends, as
// a Kafka broker ends it.
func (c *conn) unsupported(r *request) (kmsg.Response, error) {
	resp := r.body.ResponseKind()
	resp.SetVersion(r.version)
	f := reflect.ValueOf(resp).Elem().FieldByName("ErrorCode")
	if !f.IsValid() || f.Kind() != reflect.Int16 || !topLevelErrorCode(resp) {
		return nil, fmt.Errorf("%w: %s v%d is not served, and its response carries no error code", errMalformed, kmsg.NameForKey(r.key), r.version)
	}
	f.SetInt(int64(errUnsupportedVersion))
	c.s.n.rejected.Add(1)
	return resp, nil
}

// topLevelErrorCode reports whether resp's ErrorCode field is on the
// wire at resp's version: a response that encodes differently with the
// field set does carry it.
func topLevelErrorCode(resp kmsg.Response) bool {
	f := reflect.ValueOf(resp).Elem().FieldByName("ErrorCode")
	before := resp.AppendTo(nil)
	old := f.Int()
	f.SetInt(old + 1)
	after := resp.AppendTo(nil)
	f.SetInt(old)
	return string(before) != string(after)
}

// apiVersions lists the requests served.
func (c *conn) apiVersions() *kmsg.ApiVersionsResponse {
	resp := kmsg.NewPtrApiVersionsResponse()
	for _, k := range []int16{0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 18, 19} {
		v := served[k]
		resp.ApiKeys = append(resp.ApiKeys, kmsg.ApiVersionsResponseApiKey{ApiKey: k, MinVersion: v[0], MaxVersion: v[1]})
	}
	return resp
}
