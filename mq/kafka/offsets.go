package kafka

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// offsetCommit stores a group's offsets as mq consumer-group offsets.
// A member's commit must name its generation; a commit with generation
// -1 (a client that assigns partitions itself) is taken while the
// group has no members here. mq moves a group's offset forward only: a
// commit below the stored offset leaves it.
func (c *conn) offsetCommit(req *kmsg.OffsetCommitRequest) *kmsg.OffsetCommitResponse {
	ctx, cancel := c.ctx()
	defer cancel()
	resp := kmsg.NewPtrOffsetCommitResponse()
	code := int16(0)
	co := c.s.coord
	co.mu.Lock()
	g := co.groups[req.Group]
	switch {
	case req.Version >= 1 && req.Generation >= 0:
		_, _, code = co.lookup(req.Group, req.MemberID, req.Generation)
		if code == 0 && g.state == groupPreparing {
			code = errRebalanceInProgress
		}
	case g != nil && len(g.members) > 0:
		code = errUnknownMember
	}
	co.mu.Unlock()
	if req.Group == "" {
		code = errInvalidRequest
	}
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		var o *openTopic
		terr := error(nil)
		if code == 0 {
			o, terr = c.s.topics.get(ctx, t.Topic)
		}
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, code
			if code == 0 {
				err := terr
				if err == nil && p.Offset < 0 {
					rp.ErrorCode = errInvalidRequest
				} else if err == nil {
					_, err = o.t.CommitGroup(ctx, req.Group, int(p.Partition), uint64(p.Offset))
				}
				if err != nil {
					rp.ErrorCode = produceCode(err)
				}
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// offsetFetch reads a group's committed offsets: -1 where it has none.
// A request naming no topics reads every topic of the catalog.
func (c *conn) offsetFetch(req *kmsg.OffsetFetchRequest) *kmsg.OffsetFetchResponse {
	ctx, cancel := c.ctx()
	defer cancel()
	resp := kmsg.NewPtrOffsetFetchResponse()
	type ask struct {
		o     *openTopic
		name  string
		parts []int32
		err   error
	}
	var asks []ask
	if req.Topics == nil {
		ts, err := c.s.topics.list(ctx)
		if err != nil {
			resp.ErrorCode = codeOf(err)
			return resp
		}
		for _, o := range ts {
			asks = append(asks, ask{o: o, name: o.t.Ref().Name})
		}
	} else {
		for _, t := range req.Topics {
			o, err := c.s.topics.get(ctx, t.Topic)
			asks = append(asks, ask{o: o, name: t.Topic, parts: t.Partitions, err: err})
		}
	}
	for _, a := range asks {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = a.name
		parts := a.parts
		if req.Topics == nil && a.o != nil {
			for p := range a.o.t.Layout().Partitions {
				parts = append(parts, int32(p))
			}
		}
		for _, p := range parts {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset = p, -1
			off, ok, err := uint64(0), false, a.err
			if err == nil {
				off, ok, err = a.o.t.GroupOffset(ctx, req.Group, int(p))
			}
			switch {
			case err != nil:
				rp.ErrorCode = produceCode(err)
			case ok:
				rp.Offset = int64(off)
			case req.Topics == nil:
				continue // all topics: only the ones committed to
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		if req.Topics != nil || len(rt.Partitions) > 0 {
			resp.Topics = append(resp.Topics, rt)
		}
	}
	return resp
}
